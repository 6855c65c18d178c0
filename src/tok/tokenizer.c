#define _GNU_SOURCE
/* The tokenizer object: token table, lookups, added-token matching and the encode pipeline
 * (added tokens -> normalizers -> pre-tokenizers -> BPE -> post-processor), in HF's order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tok/tok_internal.h"
#include "tok/uprop_tables.h"

srt_tokenizer *tok_new(const char *name)
{
    srt_tokenizer *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->name = tok_strdup(name ? name : "tokenizer");
    t->unk_id = t->bos_id = t->eos_id = t->pad_id = -1;
    for (int i = 0; i < 256; i++)
        t->byte_id[i] = t->fallback_id[i] = -1;
    pthread_mutex_init(&t->cache_lock, NULL);
    return t;
}

static void free_trie(tok_trie *tr)
{
    free(tr->nodes);
    free(tr->edges);
    memset(tr, 0, sizeof(*tr));
}

void srt_tokenizer_free(srt_tokenizer *t)
{
    if (!t)
        return;
    free(t->name);
    free(t->tok);
    tok_buf_free(&t->pool);
    free(t->by_key.slots);
    free(t->by_str.slots);
    free(t->merges);
    for (int i = 0; i < t->n_norms; i++) {
        free(t->norms[i].a);
        free(t->norms[i].b);
    }
    free(t->norms);
    for (int i = 0; i < t->n_pretoks; i++) {
        if (t->pretoks[i].re)
            pcre2_code_free(t->pretoks[i].re);
        if (t->pretoks[i].re_base)
            pcre2_code_free(t->pretoks[i].re_base);
        free(t->pretoks[i].extra);
        free(t->pretoks[i].lit);
    }
    free(t->pretoks);
    free_trie(&t->trie_raw);
    free_trie(&t->trie_norm);
    free(t->post_pre);
    free(t->post_post);
    for (int i = 0; i < t->n_decops; i++) {
        free(t->decops[i].a);
        free(t->decops[i].b);
    }
    free(t->decops);
    free(t->bos_str);
    free(t->eos_str);
    free(t->chat_template);
    free(t->cache);
    free(t->char_id);
    pthread_mutex_destroy(&t->cache_lock);
    free(t);
}

/* ---------------------------------------------------------------- token table */

int tok_add_token(srt_tokenizer *t, int32_t id, const char *s, size_t n, uint16_t flags, srt_err *err)
{
    if (id < 0 || id > 16 * 1024 * 1024) {
        srt_err_set(err, "%s: token id %d out of range", t->name, id);
        return SRT_ERROR;
    }
    if ((uint32_t)id >= t->n_tok) {
        if ((uint32_t)id >= t->tok_cap) {
            /* grow geometrically: ids mostly arrive in order */
            uint32_t cap = t->tok_cap ? t->tok_cap : 1024;
            while (cap <= (uint32_t)id)
                cap *= 2;
            tok_entry *p = realloc(t->tok, sizeof(*p) * cap);
            if (!p) {
                srt_err_set(err, "%s: out of memory", t->name);
                return SRT_ERROR;
            }
            memset(p + t->tok_cap, 0, sizeof(*p) * (cap - t->tok_cap));
            t->tok = p;
            t->tok_cap = cap;
        }
        t->n_tok = (uint32_t)id + 1;
    }
    tok_entry *e = &t->tok[id];
    if (e->str_len || (e->flags & (TOKF_ADDED | TOKF_IN_MODEL))) {
        /* an added token over a model token: same string keeps the model key, flags merge */
        if (e->str_len == n && memcmp(t->pool.p + e->str_off, s, n) == 0) {
            e->flags |= flags;
            return SRT_OK;
        }
        if (!(flags & TOKF_ADDED)) {
            srt_err_set(err, "%s: token id %d appears twice in the vocab", t->name, id);
            return SRT_ERROR;
        }
    }
    size_t off = t->pool.len;
    if (tok_buf_append(&t->pool, s, n)) {
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    e->str_off = e->key_off = (uint32_t)off;
    e->str_len = e->key_len = (uint32_t)n;
    e->byte_val = -1;
    e->flags = (uint16_t)(e->flags | flags);
    if (flags & TOKF_ADDED)
        e->flags &= (uint16_t)~TOKF_IN_MODEL;
    return SRT_OK;
}

static int map_build(srt_tokenizer *t, tok_strmap *m, int by_key)
{
    uint32_t size = 1024;
    while (size < t->n_tok * 2u + 16)
        size *= 2;
    m->slots = calloc(size, sizeof(uint32_t));
    if (!m->slots)
        return -1;
    m->mask = size - 1;
    for (uint32_t id = 0; id < t->n_tok; id++) {
        const tok_entry *e = &t->tok[id];
        if (by_key && !(e->flags & TOKF_IN_MODEL))
            continue;
        if (!by_key && !e->str_len)
            continue;
        const char *s = t->pool.p + (by_key ? e->key_off : e->str_off);
        uint32_t n = by_key ? e->key_len : e->str_len;
        uint32_t h = (uint32_t)tok_hash(s, n) & m->mask;
        for (;;) {
            uint32_t v = m->slots[h];
            if (!v)
                break;
            const tok_entry *o = &t->tok[v - 1];
            const char *os = t->pool.p + (by_key ? o->key_off : o->str_off);
            uint32_t on = by_key ? o->key_len : o->str_len;
            if (on == n && memcmp(os, s, n) == 0)
                break; /* duplicate key: for strings an added token wins (it comes later in id order
                          only by chance, so prefer the ADDED flag explicitly) */
            h = (h + 1) & m->mask;
        }
        if (!m->slots[h] || (!by_key && (e->flags & TOKF_ADDED) && !(t->tok[m->slots[h] - 1].flags & TOKF_ADDED)))
            m->slots[h] = id + 1;
    }
    return 0;
}

int32_t tok_lookup(const srt_tokenizer *t, const tok_strmap *m, const char *s, size_t n, int by_key)
{
    if (!m->slots)
        return -1;
    uint32_t h = (uint32_t)tok_hash(s, n) & m->mask;
    for (;;) {
        uint32_t v = m->slots[h];
        if (!v)
            return -1;
        const tok_entry *e = &t->tok[v - 1];
        const char *es = t->pool.p + (by_key ? e->key_off : e->str_off);
        uint32_t en = by_key ? e->key_len : e->str_len;
        if (en == n && memcmp(es, s, n) == 0)
            return (int32_t)(v - 1);
        h = (h + 1) & m->mask;
    }
}

/* ---------------------------------------------------------------- merges */

int tok_alloc_merges(srt_tokenizer *t, size_t n, srt_err *err)
{
    uint32_t size = 1024;
    while (size < n * 2 + 16)
        size *= 2;
    t->merges = malloc(sizeof(*t->merges) * size);
    if (!t->merges) {
        srt_err_set(err, "%s: out of memory for %zu merges", t->name, n);
        return SRT_ERROR;
    }
    for (uint32_t i = 0; i < size; i++)
        t->merges[i].left = -1;
    t->merges_mask = size - 1;
    return SRT_OK;
}

static inline uint32_t merge_hash(int32_t a, int32_t b)
{
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    k *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

int tok_add_merge(srt_tokenizer *t, int32_t left, int32_t right, int32_t result, uint32_t rank, srt_err *err)
{
    uint32_t h = merge_hash(left, right) & t->merges_mask;
    for (uint32_t probes = 0; probes <= t->merges_mask; probes++) {
        struct tok_merge *m = &t->merges[h];
        if (m->left < 0 || (m->left == left && m->right == right)) {
            /* a repeated pair keeps the later rank, as HF's map does */
            m->left = left;
            m->right = right;
            m->result = result;
            m->rank = rank;
            return SRT_OK;
        }
        h = (h + 1) & t->merges_mask;
    }
    srt_err_set(err, "%s: merge table full", t->name);
    return SRT_ERROR;
}

const struct tok_merge *tok_find_merge(const srt_tokenizer *t, int32_t left, int32_t right)
{
    uint32_t h = merge_hash(left, right) & t->merges_mask;
    for (;;) {
        const struct tok_merge *m = &t->merges[h];
        if (m->left < 0)
            return NULL;
        if (m->left == left && m->right == right)
            return m;
        h = (h + 1) & t->merges_mask;
    }
}

/* ---------------------------------------------------------------- added-token tries */

static int trie_build(srt_tokenizer *t, tok_trie *tr, int normalized, srt_err *err)
{
    /* Build with a simple child-list representation, then freeze into edge arrays. */
    size_t cap_nodes = 64, n_nodes = 1;
    struct bn { int32_t token; uint32_t child, sibling; uint8_t byte; } *bn = calloc(cap_nodes, sizeof(*bn));
    if (!bn)
        goto oom;
    bn[0].token = -1;
    for (uint32_t id = 0; id < t->n_tok; id++) {
        const tok_entry *e = &t->tok[id];
        if (!(e->flags & TOKF_ADDED) || !e->str_len)
            continue;
        if (!!(e->flags & TOKF_NORMALIZED) != normalized)
            continue;
        const uint8_t *s = (const uint8_t *)t->pool.p + e->str_off;
        uint32_t node = 0;
        for (uint32_t i = 0; i < e->str_len; i++) {
            uint32_t c = bn[node].child;
            while (c && bn[c].byte != s[i])
                c = bn[c].sibling;
            if (!c) {
                if (n_nodes == cap_nodes) {
                    cap_nodes *= 2;
                    void *p = realloc(bn, cap_nodes * sizeof(*bn));
                    if (!p)
                        goto oom;
                    bn = p;
                }
                c = (uint32_t)n_nodes++;
                bn[c].token = -1;
                bn[c].child = 0;
                bn[c].byte = s[i];
                bn[c].sibling = bn[node].child;
                bn[node].child = c;
            }
            node = c;
        }
        if (bn[node].token < 0 || (e->flags & TOKF_SPECIAL))
            bn[node].token = (int32_t)id;
        tr->first[s[0]] = 1;
    }
    tr->nodes = calloc(n_nodes, sizeof(*tr->nodes));
    tr->edges = calloc(n_nodes, sizeof(*tr->edges));
    if (!tr->nodes || !tr->edges)
        goto oom;
    uint32_t ne = 0;
    for (uint32_t i = 0; i < n_nodes; i++) {
        tr->nodes[i].token = bn[i].token;
        tr->nodes[i].first_edge = ne;
        for (uint32_t c = bn[i].child; c; c = bn[c].sibling) {
            tr->edges[ne].byte = bn[c].byte;
            tr->edges[ne].child = c;
            ne++;
        }
        tr->nodes[i].n_edges = ne - tr->nodes[i].first_edge;
    }
    tr->n_nodes = (uint32_t)n_nodes;
    tr->n_edges = ne;
    free(bn);
    return SRT_OK;
oom:
    free(bn);
    srt_err_set(err, "%s: out of memory", t->name);
    return SRT_ERROR;
}

/* Longest added token starting at s (id or -1), with its length. Special tokens are skipped by the
 * caller after the match, exactly as HF skips them after its leftmost-longest search. */
static int32_t trie_match(const tok_trie *tr, const uint8_t *s, size_t n, size_t *mlen)
{
    int32_t best = -1;
    uint32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        const tok_trie_node *nd = &tr->nodes[node];
        uint32_t next = 0;
        for (uint32_t k = 0; k < nd->n_edges; k++) {
            if (tr->edges[nd->first_edge + k].byte == s[i]) {
                next = tr->edges[nd->first_edge + k].child;
                break;
            }
        }
        if (!next)
            break;
        node = next;
        if (tr->nodes[node].token >= 0) {
            best = tr->nodes[node].token;
            *mlen = i + 1;
        }
    }
    return best;
}

/* ---------------------------------------------------------------- finishing a load */

/* Unicode general categories as HF's Oniguruma has them: PCRE2's (older) class plus the characters
 * assigned since (uprop_tables.h). The index of a \p{NAME} name (short or long, matched loosely as
 * Oniguruma does: case, ' ', '_' and '-' ignored) in tok_gc_extra, or -1. */
static int gc_index(const char *name, size_t n)
{
    char key[40];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (c == ' ' || c == '_' || c == '-')
            continue;
        if (k + 1 >= sizeof(key))
            return -1;
        key[k++] = (char)((c >= 'A' && c <= 'Z') ? c + 32 : c);
    }
    key[k] = 0;
    size_t lo = 0, hi = sizeof(tok_gc_names) / sizeof(tok_gc_names[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(tok_gc_names[mid].loose, key);
        if (!c) {
            for (size_t j = 0; j < sizeof(tok_gc_extra) / sizeof(tok_gc_extra[0]); j++)
                if (!strcmp(tok_gc_extra[j].name, tok_gc_names[mid].gc))
                    return (int)j;
            return -1;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Appends general category gc (negated or not) to a pattern being rewritten, in or out of a class,
 * with its additions (and their text to *added) unless extras is 0. A negated category inside a
 * class cannot take the additions; it keeps PCRE2's class. */
static void append_gc(tok_buf *b, int gc, int neg, int in_class, int extras, tok_buf *added)
{
    const char *name = tok_gc_extra[gc].name, *extra = extras ? tok_gc_extra[gc].extra : "";
    if (!(neg && in_class))
        tok_buf_append(added, extra, strlen(extra));
    int wrap = !in_class && *extra;
    if (wrap)
        tok_buf_append(b, neg ? "[^" : "[", neg ? 2 : 1);
    tok_buf_append(b, (neg && !wrap) ? "\\P{" : "\\p{", 3);
    tok_buf_append(b, name, strlen(name));
    tok_buf_append(b, "}", 1);
    if (!(neg && in_class))
        tok_buf_append(b, extra, strlen(extra));
    if (wrap)
        tok_buf_append(b, "]", 1);
}

/* The pattern as PCRE2 is given it (see tok_compile_regex), with the general categories' additions
 * (their class text also appended to *added) or without (extras 0). */
static void translate_regex(const char *pattern, int extras, tok_buf *b, tok_buf *added)
{
    /* Oniguruma's \s (HF's engine) is Unicode White_Space; PCRE2's UCP \s also takes U+180E and
     * friends, so spell the class out. \p{..} and \d get the characters Oniguruma's newer Unicode
     * has in them (see gc_index). */
    static const char ws[] = "\\t\\n\\x{0b}\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
                             "\\x{202f}\\x{205f}\\x{3000}";
    int in_class = 0;
    for (size_t i = 0; pattern[i]; i++) {
        char c = pattern[i];
        if (c == '\\' && pattern[i + 1]) {
            char d = pattern[i + 1];
            if (d == 's') {
                if (in_class)
                    tok_buf_append(b, ws, sizeof(ws) - 1);
                else {
                    tok_buf_append(b, "[", 1);
                    tok_buf_append(b, ws, sizeof(ws) - 1);
                    tok_buf_append(b, "]", 1);
                }
            } else if (d == 'S' && !in_class) {
                tok_buf_append(b, "[^", 2);
                tok_buf_append(b, ws, sizeof(ws) - 1);
                tok_buf_append(b, "]", 1);
            } else if (d == 'd' || d == 'D') {
                append_gc(b, gc_index("Nd", 2), d == 'D', in_class, extras, added);
            } else if ((d == 'p' || d == 'P') && pattern[i + 2] == '{') {
                const char *name = pattern + i + 3, *close = strchr(name, '}');
                int neg = d == 'P';
                if (close && *name == '^') {
                    neg = !neg;
                    name++;
                }
                int gc = close ? gc_index(name, (size_t)(close - name)) : -1;
                if (gc < 0) { /* a script or another property: PCRE2's own */
                    tok_buf_append(b, pattern + i, 2);
                    i++;
                    continue;
                }
                append_gc(b, gc, neg, in_class, extras, added);
                i = (size_t)(close - pattern);
                continue;
            } else {
                tok_buf_append(b, pattern + i, 2);
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            tok_buf_append(b, &c, 1);
            if (pattern[i + 1] == '^') {
                tok_buf_append(b, "^", 1);
                i++;
            }
            if (pattern[i + 1] == ']') { /* a literal ] first in a class */
                tok_buf_append(b, "]", 1);
                i++;
            }
            continue;
        }
        if (c == ']' && in_class)
            in_class = 0;
        tok_buf_append(b, &c, 1);
    }
}

static pcre2_code *compile_pcre2(const tok_buf *b, const char *pattern, const char *where, srt_err *err)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)b->p, b->len, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &eo,
                                   NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        srt_err_set(err, "%s: regex /%s/ does not compile at offset %zu: %s", where, pattern, (size_t)eo,
                    (char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter when JIT is absent */
    return re;
}

static int cmp_range(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The ranges of class text made of \x{H} and \x{H}-\x{H} items (uprop_tables.h's form), sorted and
 * merged into p->extra. */
static int parse_extra(tok_pretok *p, const tok_buf *added)
{
    size_t n = 0, cap = 0;
    uint32_t(*r)[2] = NULL;
    const char *s = added->p, *end = added->p + added->len;
    while (s && s < end) {
        uint32_t lo, hi;
        char *e;
        if (strncmp(s, "\\x{", 3))
            return SRT_ERROR;
        lo = hi = (uint32_t)strtoul(s + 3, &e, 16);
        s = e + 1;   /* past '}' */
        if (s < end && *s == '-') {
            if (strncmp(s + 1, "\\x{", 3))
                return SRT_ERROR;
            hi = (uint32_t)strtoul(s + 4, &e, 16);
            s = e + 1;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            uint32_t(*g)[2] = realloc(r, nc * sizeof *r);
            if (!g) {
                free(r);
                return SRT_ERROR;
            }
            r = g;
            cap = nc;
        }
        r[n][0] = lo;
        r[n][1] = hi;
        n++;
    }
    if (n)
        qsort(r, n, sizeof *r, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[i][0] <= r[m - 1][1] + 1) {
            if (r[i][1] > r[m - 1][1])
                r[m - 1][1] = r[i][1];
        } else {
            r[m][0] = r[i][0];
            r[m][1] = r[i][1];
            m++;
        }
    }
    p->extra = r;
    p->n_extra = m;
    for (size_t i = 0; i < m; i++)
        for (uint32_t blk = r[i][0] >> 8; blk <= r[i][1] >> 8 && blk < 0x110000 / 256; blk++)
            p->extra_blocks[blk / 64] |= 1ull << (blk % 64);
    return SRT_OK;
}

/* full: the pattern; base: the same with the additions that are literal text in full left out
 * (tok_compile_numeric's), or NULL when there are none. Both are translated twice, with and
 * without the categories' additions: the second compiles to p->re_base, which splits any text
 * without a code point of the additions exactly as p->re does (a class differs from its addition-
 * less self only on those code points) and runs ~1.4x as fast (PCRE2's JIT tests an explicit range
 * list after the property, on every character that is not in the class). */
static int compile_regex2(tok_pretok *p, const char *full, const char *base, const char *literal_extra,
                          const char *where, srt_err *err)
{
    tok_buf b = {0}, b0 = {0}, added = {0};
    int rc = SRT_ERROR;
    translate_regex(full, 1, &b, &added);
    translate_regex(base ? base : full, 0, &b0, &added);
    if (literal_extra)
        tok_buf_append(&added, literal_extra, strlen(literal_extra));
    if (!b.p || !b0.p || (added.len && !added.p)) {
        srt_err_set(err, "%s: out of memory", where);
        goto out;
    }
    if (!(p->re = compile_pcre2(&b, full, where, err)))
        goto out;
    if (b.len != b0.len || memcmp(b.p, b0.p, b.len)) {
        if (parse_extra(p, &added) != SRT_OK) {
            srt_err_set(err, "%s: out of memory (or a malformed class in uprop_tables.h)", where);
            goto out;
        }
        if (!(p->re_base = compile_pcre2(&b0, full, where, err)))
            goto out;
    }
    rc = SRT_OK;
out:
    tok_buf_free(&b);
    tok_buf_free(&b0);
    tok_buf_free(&added);
    return rc;
}

int tok_compile_regex(tok_pretok *p, const char *pattern, const char *where, srt_err *err)
{
    return compile_regex2(p, pattern, NULL, NULL, where, err);
}

int tok_compile_numeric(tok_pretok *p, int individual, const char *where, srt_err *err)
{
    /* HF's Digits pre-tokenizer splits on Rust's char::is_numeric: the N categories of Rust's Unicode */
    const char *extra = "";
    for (size_t j = 0; j < sizeof(tok_gc_extra) / sizeof(tok_gc_extra[0]); j++)
        if (!strcmp(tok_gc_extra[j].name, "rust_numeric"))
            extra = tok_gc_extra[j].extra;
    size_t n = strlen(extra) + 16;
    char *re = malloc(n);
    if (!re) {
        srt_err_set(err, "%s: out of memory", where);
        return SRT_ERROR;
    }
    snprintf(re, n, "[\\p{N}%s]%s", extra, individual ? "" : "+");
    int rc = compile_regex2(p, re, individual ? "[\\p{N}]" : "[\\p{N}]+", extra, where, err);
    free(re);
    return rc;
}

int tok_finish(srt_tokenizer *t, srt_err *err)
{
    if (!t->n_tok) {
        srt_err_set(err, "%s: empty vocabulary", t->name);
        return SRT_ERROR;
    }
    /* byte-level: model keys become raw bytes, and every byte must have a token */
    if (t->byte_level) {
        int16_t inv[0x144];
        for (int i = 0; i < 0x144; i++)
            inv[i] = -1;
        for (int b = 0; b < 256; b++)
            inv[tok_byte_to_cp((uint8_t)b)] = (int16_t)b;
        tok_buf keys = {0};
        for (uint32_t id = 0; id < t->n_tok; id++) {
            tok_entry *e = &t->tok[id];
            if (!(e->flags & TOKF_IN_MODEL))
                continue;
            const uint8_t *s = (const uint8_t *)t->pool.p + e->str_off;
            size_t start = keys.len;
            int ok = 1;
            for (size_t i = 0; i < e->str_len;) {
                uint32_t cp;
                size_t l = tok_utf8_len(s + i, e->str_len - i);
                if (!l) {
                    ok = 0;
                    break;
                }
                tok_utf8_decode(s + i, &cp);
                i += l;
                if (cp >= 0x144 || inv[cp] < 0) {
                    ok = 0;
                    break;
                }
                uint8_t byte = (uint8_t)inv[cp];
                if (tok_buf_append(&keys, &byte, 1)) {
                    tok_buf_free(&keys);
                    srt_err_set(err, "%s: out of memory", t->name);
                    return SRT_ERROR;
                }
            }
            if (!ok) {
                /* not spelled in the byte alphabet: BPE can never produce it */
                keys.len = start;
                e->flags &= (uint16_t)~TOKF_IN_MODEL;
                continue;
            }
            e->key_off = (uint32_t)start; /* fixed up below, once the key buffer is final */
            e->key_len = (uint32_t)(keys.len - start);
            e->flags |= 0x8000; /* key lives in `keys` */
        }
        size_t base = t->pool.len;
        if (tok_buf_append(&t->pool, keys.p ? keys.p : "", keys.len)) {
            tok_buf_free(&keys);
            srt_err_set(err, "%s: out of memory", t->name);
            return SRT_ERROR;
        }
        tok_buf_free(&keys);
        for (uint32_t id = 0; id < t->n_tok; id++) {
            tok_entry *e = &t->tok[id];
            if (e->flags & 0x8000) {
                e->key_off += (uint32_t)base;
                e->flags &= 0x7FFF;
            }
        }
    }
    if (map_build(t, &t->by_key, 1) || map_build(t, &t->by_str, 0)) {
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    if (t->byte_level) {
        for (int b = 0; b < 256; b++) {
            char c = (char)b;
            t->byte_id[b] = tok_lookup(t, &t->by_key, &c, 1, 1);
        }
    }
    if (!t->byte_level) {
        /* single characters are BPE's starting symbols: look the common ones up directly */
        t->char_id = malloc(sizeof(int32_t) * TOK_CHAR_TABLE);
        if (!t->char_id) {
            srt_err_set(err, "%s: out of memory", t->name);
            return SRT_ERROR;
        }
        for (uint32_t cp = 0; cp < TOK_CHAR_TABLE; cp++) {
            uint8_t u[4];
            size_t l = tok_utf8_encode(cp, u);
            t->char_id[cp] = (cp >= 0xD800 && cp < 0xE000) ? -1 : tok_lookup(t, &t->by_key, (const char *)u, l, 1);
        }
    }
    if (t->byte_fallback) {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof(name), "<0x%02X>", b);
            t->fallback_id[b] = tok_lookup(t, &t->by_key, name, 6, 1);
        }
    }
    int has_norm = 0;
    for (uint32_t id = 0; id < t->n_tok; id++)
        if ((t->tok[id].flags & TOKF_ADDED) && (t->tok[id].flags & TOKF_NORMALIZED))
            has_norm = 1;
    t->has_norm_added = has_norm;
    if (trie_build(t, &t->trie_raw, 0, err) || trie_build(t, &t->trie_norm, 1, err))
        return SRT_ERROR;
    if (tok_build_decoder_plan(t, err))
        return SRT_ERROR;
    t->cache = calloc(TOK_CACHE_SLOTS, sizeof(*t->cache));
    if (!t->cache) {
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    return SRT_OK;
}

/* ---------------------------------------------------------------- encoding */


static int push_piece(tok_scratch *s, piece **list, size_t *n, size_t off, size_t len, int at0)
{
    if (!len)
        return 0;
    if (*n == s->p_cap) {
        size_t cap = s->p_cap ? s->p_cap * 2 : 64;
        piece *a = realloc(s->pa, cap * sizeof(piece));
        if (!a)
            return -1;
        s->pa = a;
        piece *b = realloc(s->pb, cap * sizeof(piece));
        if (!b)
            return -1;
        s->pb = b;
        s->p_cap = cap;
        /* the caller's list pointer may have moved */
        *list = (list == &s->pa) ? s->pa : s->pb;
    }
    (*list)[*n].off = off;
    (*list)[*n].len = len;
    (*list)[*n].at0 = at0;
    (*n)++;
    return 0;
}

static int push_ids(tok_buf *ids, const int32_t *v, size_t n)
{
    return tok_buf_append(ids, v, n * sizeof(int32_t));
}

/* Segments (start, end, is_match) of a split, then grouped by HF's SplitDelimiterBehavior. */
typedef struct seg {
    size_t a, b;
    int m;
} seg;

static int split_apply(tok_scratch *s, const piece *p, seg *sg, size_t ns, int behavior, piece **out, size_t *nout)
{
    size_t i = 0;
    (void)i;
    switch (behavior) {
    case SPLIT_ISOLATED:
        for (size_t k = 0; k < ns; k++)
            if (push_piece(s, out, nout, p->off + sg[k].a, sg[k].b - sg[k].a, p->at0 && sg[k].a == 0))
                return -1;
        return 0;
    case SPLIT_REMOVED:
        for (size_t k = 0; k < ns; k++)
            if (!sg[k].m && push_piece(s, out, nout, p->off + sg[k].a, sg[k].b - sg[k].a, p->at0 && sg[k].a == 0))
                return -1;
        return 0;
    default:
        break;
    }
    /* merge in place, then push */
    size_t n = 0;
    int prev = 0;
    if (behavior == SPLIT_MERGED_NEXT) {
        /* walk backwards, like HF */
        seg *tmp = sg;
        size_t w = ns;
        for (size_t k = ns; k-- > 0;) {
            if (tmp[k].m && !prev && w < ns)
                tmp[w].a = tmp[k].a;
            else
                tmp[--w] = tmp[k];
            prev = tmp[k].m;
        }
        for (size_t k = w; k < ns; k++)
            if (push_piece(s, out, nout, p->off + sg[k].a, sg[k].b - sg[k].a, p->at0 && sg[k].a == 0))
                return -1;
        return 0;
    }
    for (size_t k = 0; k < ns; k++) {
        int merge = behavior == SPLIT_CONTIGUOUS ? (k > 0 && sg[k].m == prev)
                                                 : (sg[k].m && !prev && n > 0); /* MERGED_PREV */
        if (merge)
            sg[n - 1].b = sg[k].b;
        else
            sg[n++] = sg[k];
        prev = sg[k].m;
    }
    for (size_t k = 0; k < n; k++)
        if (push_piece(s, out, nout, p->off + sg[k].a, sg[k].b - sg[k].a, p->at0 && sg[k].a == 0))
            return -1;
    return 0;
}

/* Whether text has a code point of pt->extra. Texts are valid UTF-8 here; every code point below
 * the first range is passed over by its lead byte alone. */
static int has_extra(const tok_pretok *pt, const char *text, size_t len)
{
    const uint8_t *u = (const uint8_t *)text;
    uint32_t first = pt->extra[0][0];
    uint8_t lead = first < 0x80 ? 0 : first < 0x800 ? 0xC0 : first < 0x10000 ? 0xE0 : 0xF0;
    for (size_t i = 0; i < len; i++) {
        if (u[i] < lead || tok_utf8_len(u + i, len - i) == 0)
            continue;
        uint32_t cp;
        i += tok_utf8_decode(u + i, &cp) - 1;
        if (cp >= 0x110000 || !(pt->extra_blocks[cp >> 14] >> (cp >> 8 & 63) & 1))
            continue;   /* most scripts' blocks have no addition */
        size_t lo = 0, hi = pt->n_extra;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cp < pt->extra[mid][0])
                hi = mid;
            else if (cp > pt->extra[mid][1])
                lo = mid + 1;
            else
                return 1;
        }
    }
    return 0;
}

static int regex_segments(const srt_tokenizer *t, tok_scratch *s, const tok_pretok *pt, const char *text, size_t len,
                          seg **segs, size_t *ns, size_t *cap, srt_err *err)
{
    size_t pos = 0, last = 0;
    *ns = 0;
#define PUSH_SEG(A, B, M)                                                                   \
    do {                                                                                   \
        if (*ns == *cap) {                                                                 \
            size_t nc = *cap ? *cap * 2 : 64;                                              \
            seg *ng = realloc(*segs, nc * sizeof(seg));                                    \
            if (!ng) {                                                                     \
                srt_err_set(err, "%s: out of memory", t->name);                            \
                return -1;                                                                 \
            }                                                                              \
            *segs = ng;                                                                    \
            *cap = nc;                                                                     \
        }                                                                                  \
        (*segs)[*ns].a = (A);                                                              \
        (*segs)[*ns].b = (B);                                                              \
        (*segs)[*ns].m = (M);                                                              \
        (*ns)++;                                                                           \
    } while (0)
    if (pt->lit) {
        while (pos + pt->lit_len <= len) {
            const char *f = memmem(text + pos, len - pos, pt->lit, pt->lit_len);
            if (!f)
                break;
            size_t a = (size_t)(f - text);
            if (a > last)
                PUSH_SEG(last, a, pt->invert);
            PUSH_SEG(a, a + pt->lit_len, !pt->invert);
            pos = last = a + pt->lit_len;
        }
    } else {
        const pcre2_code *re = pt->re_base && !has_extra(pt, text, len) ? pt->re_base : pt->re;
        while (pos <= len) {
            int rc = pcre2_match(re, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, s->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof(msg));
                srt_err_set(err, "%s: pre-tokenizer regex failed: %s", t->name, (char *)msg);
                return -1;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            size_t a = ov[0], b = ov[1];
            if (b == a) { /* empty match: step over one character */
                if (a >= len)
                    break;
                size_t l = tok_utf8_len((const uint8_t *)text + a, len - a);
                pos = a + (l ? l : 1);
                continue;
            }
            if (a > last)
                PUSH_SEG(last, a, pt->invert);
            PUSH_SEG(a, b, !pt->invert);
            pos = last = b;
        }
    }
    if (last < len)
        PUSH_SEG(last, len, pt->invert);
#undef PUSH_SEG
    return 0;
}

static int pretokenize_step(const srt_tokenizer *t, tok_scratch *s, const tok_pretok *pt, seg **segs, size_t *segcap,
                            srt_err *err)
{
    s->pb_n = 0;
    for (size_t i = 0; i < s->pa_n; i++) {
        piece p = s->pa[i];
        switch (pt->kind) {
        case PRE_BYTELEVEL:
            if (pt->add_prefix_space && s->arena.p[p.off] != ' ') {
                size_t off = s->arena.len;
                if (tok_buf_reserve(&s->arena, p.len + 2)) /* the copy reads from the arena itself */
                    goto oom;
                tok_buf_append(&s->arena, " ", 1);
                tok_buf_append(&s->arena, s->arena.p + p.off, p.len);
                p.off = off;
                p.len += 1;
            }
            if (!pt->re) {
                if (push_piece(s, &s->pb, &s->pb_n, p.off, p.len, p.at0))
                    goto oom;
                break;
            }
            /* fallthrough */
        case PRE_SPLIT:
        case PRE_DIGITS: {
            size_t ns;
            if (regex_segments(t, s, pt, s->arena.p + p.off, p.len, segs, &ns, segcap, err))
                return -1;
            if (split_apply(s, &p, *segs, ns, pt->behavior, &s->pb, &s->pb_n))
                goto oom;
            break;
        }
        case PRE_METASPACE: {
            size_t off = s->arena.len;
            const char *src = s->arena.p + p.off; /* may move on append: copy via tmp */
            s->tmp.len = 0;
            if (tok_buf_append(&s->tmp, src, p.len))
                goto oom;
            /* HF tests for the replacement after spaces became replacements */
            int starts = (p.len && s->tmp.p[0] == ' ') ||
                         (p.len >= pt->repl_len && memcmp(s->tmp.p, pt->repl, pt->repl_len) == 0);
            int prepend = !starts && (pt->prepend == 2 || (pt->prepend == 1 && p.at0));
            if (prepend && tok_buf_append(&s->arena, pt->repl, pt->repl_len))
                goto oom;
            for (size_t k = 0; k < s->tmp.len; k++) {
                if (s->tmp.p[k] == ' ') {
                    if (tok_buf_append(&s->arena, pt->repl, pt->repl_len))
                        goto oom;
                } else if (tok_buf_append(&s->arena, s->tmp.p + k, 1))
                    goto oom;
            }
            piece q = {off, s->arena.len - off, p.at0};
            if (!pt->split) {
                if (push_piece(s, &s->pb, &s->pb_n, q.off, q.len, q.at0))
                    goto oom;
                break;
            }
            /* split on the replacement, each keeping it at its front */
            const char *txt = s->arena.p + q.off;
            size_t start = 0;
            for (size_t k = 0; k + pt->repl_len <= q.len;) {
                if (k > start && memcmp(txt + k, pt->repl, pt->repl_len) == 0) {
                    if (push_piece(s, &s->pb, &s->pb_n, q.off + start, k - start, q.at0 && start == 0))
                        goto oom;
                    txt = s->arena.p + q.off;
                    start = k;
                }
                k += memcmp(txt + k, pt->repl, pt->repl_len) == 0 ? pt->repl_len : 1;
            }
            if (push_piece(s, &s->pb, &s->pb_n, q.off + start, q.len - start, q.at0 && start == 0))
                goto oom;
            break;
        }
        default:
            srt_err_set(err, "%s: unsupported pre-tokenizer step", t->name);
            return -1;
        }
    }
    piece *tp = s->pa;
    s->pa = s->pb;
    s->pb = tp;
    s->pa_n = s->pb_n;
    return 0;
oom:
    srt_err_set(err, "%s: out of memory", t->name);
    return -1;
}

/* Runs the normalizers over arena[off, off+len) and returns the normalized text's place in the arena. */
static int normalize(const srt_tokenizer *t, tok_scratch *s, size_t *off, size_t *len, srt_err *err)
{
    for (int k = 0; k < t->n_norms; k++) {
        const tok_norm *nm = &t->norms[k];
        s->tmp.len = 0;
        const char *src = s->arena.p + *off;
        size_t n = *len;
        switch (nm->kind) {
        case NORM_NFC:
        case NORM_NFKC:
            if (!tok_nfc_needed(src, n, nm->kind == NORM_NFKC))
                continue;
            if (tok_nfc(src, n, nm->kind == NORM_NFKC, &s->tmp))
                goto oom;
            break;
        case NORM_PREPEND:
            if (!n)
                continue;
            if (tok_buf_append(&s->tmp, nm->a, nm->alen) || tok_buf_append(&s->tmp, src, n))
                goto oom;
            break;
        case NORM_REPLACE: {
            if (!nm->alen || !memmem(src, n, nm->a, nm->alen))
                continue;
            size_t i = 0;
            while (i < n) {
                if (i + nm->alen <= n && memcmp(src + i, nm->a, nm->alen) == 0) {
                    if (tok_buf_append(&s->tmp, nm->b, nm->blen))
                        goto oom;
                    i += nm->alen;
                } else {
                    if (tok_buf_append(&s->tmp, src + i, 1))
                        goto oom;
                    i++;
                }
            }
            break;
        }
        case NORM_STRIP: {
            size_t a = 0, b = n;
            if (nm->left) {
                while (a < b) {
                    uint32_t cp;
                    size_t l = tok_utf8_decode((const uint8_t *)src + a, &cp);
                    if (!tok_is_whitespace(cp))
                        break;
                    a += l;
                }
            }
            if (nm->right) {
                while (b > a) {
                    size_t q = b - 1;
                    while (q > a && ((uint8_t)src[q] & 0xC0) == 0x80)
                        q--;
                    uint32_t cp;
                    tok_utf8_decode((const uint8_t *)src + q, &cp);
                    if (!tok_is_whitespace(cp))
                        break;
                    b = q;
                }
            }
            *off += a;
            *len = b - a;
            continue;
        }
        }
        size_t noff = s->arena.len;
        if (tok_buf_append(&s->arena, s->tmp.p, s->tmp.len))
            goto oom;
        *off = noff;
        *len = s->tmp.len;
    }
    return 0;
oom:
    srt_err_set(err, "%s: out of memory", t->name);
    return -1;
}

typedef struct enc_ctx {
    const srt_tokenizer *t;
    tok_scratch *s;
    unsigned flags;
    seg *segs;
    size_t segcap;
    srt_err *err;
} enc_ctx;

/* Pre-tokenize arena[off, off+len) and BPE every piece. */
static int encode_normalized(enc_ctx *c, size_t off, size_t len, int at0)
{
    const srt_tokenizer *t = c->t;
    tok_scratch *s = c->s;
    s->pa_n = 0;
    if (push_piece(s, &s->pa, &s->pa_n, off, len, at0))
        goto oom;
    for (int k = 0; k < t->n_pretoks; k++)
        if (pretokenize_step(t, s, &t->pretoks[k], &c->segs, &c->segcap, c->err))
            return -1;
    for (size_t i = 0; i < s->pa_n; i++)
        if (tok_bpe_word(t, s, s->arena.p + s->pa[i].off, s->pa[i].len, &s->ids, c->err))
            return -1;
    return 0;
oom:
    srt_err_set(c->err, "%s: out of memory", t->name);
    return -1;
}

/* Finds added tokens in text[0..len) (leftmost-longest); calls back for text runs and tokens. */
typedef int (*seg_fn)(enc_ctx *c, const char *text, size_t a, size_t b, int32_t id, int at0);

static int split_added(enc_ctx *c, const tok_trie *tr, const char *text, size_t len, int at0_base, seg_fn fn)
{
    const srt_tokenizer *t = c->t;
    size_t last = 0, i = 0;
    if (tr->n_nodes > 1) {
        while (i < len) {
            if (!tr->first[(uint8_t)text[i]]) {
                i++;
                continue;
            }
            size_t ml = 0;
            int32_t id = trie_match(tr, (const uint8_t *)text + i, len - i, &ml);
            if (id < 0) {
                i++;
                continue;
            }
            const tok_entry *e = &t->tok[id];
            if ((e->flags & TOKF_SPECIAL) && !(c->flags & SRT_TOK_PARSE_SPECIAL)) {
                i += ml; /* consumed as text, like HF's skip after the match */
                continue;
            }
            size_t a = i, b = i + ml;
            if (e->flags & TOKF_LSTRIP) {
                while (a > last) {
                    size_t q = a - 1;
                    while (q > last && ((uint8_t)text[q] & 0xC0) == 0x80)
                        q--;
                    uint32_t cp;
                    tok_utf8_decode((const uint8_t *)text + q, &cp);
                    if (!tok_is_whitespace(cp))
                        break;
                    a = q;
                }
            }
            if (e->flags & TOKF_RSTRIP) {
                while (b < len) {
                    uint32_t cp;
                    size_t l = tok_utf8_decode((const uint8_t *)text + b, &cp);
                    if (!tok_is_whitespace(cp))
                        break;
                    b += l;
                }
            }
            if (a > last && fn(c, text, last, a, -1, at0_base && last == 0))
                return -1;
            if (fn(c, text, a, b, id, 0))
                return -1;
            last = i = b;
        }
    }
    if (len > last && fn(c, text, last, len, -1, at0_base && last == 0))
        return -1;
    return 0;
}

static int on_norm_segment(enc_ctx *c, const char *text, size_t a, size_t b, int32_t id, int at0)
{
    if (id >= 0)
        return push_ids(&c->s->ids, &id, 1) ? -1 : 0;
    size_t off = c->s->arena.len;
    if (tok_buf_append(&c->s->arena, text + a, b - a)) {
        srt_err_set(c->err, "%s: out of memory", c->t->name);
        return -1;
    }
    return encode_normalized(c, off, b - a, at0);
}

static int on_raw_segment(enc_ctx *c, const char *text, size_t a, size_t b, int32_t id, int at0)
{
    tok_scratch *s = c->s;
    if (id >= 0)
        return push_ids(&s->ids, &id, 1) ? -1 : 0;
    s->arena.len = 0;
    if (tok_buf_append(&s->arena, text + a, b - a)) {
        srt_err_set(c->err, "%s: out of memory", c->t->name);
        return -1;
    }
    size_t off = 0, len = b - a;
    if (normalize(c->t, s, &off, &len, c->err))
        return -1;
    if (!c->t->has_norm_added)
        return encode_normalized(c, off, len, at0);
    /* normalized added tokens: the normalized text is copied out since encoding appends to the arena */
    tok_buf norm = {0};
    if (tok_buf_append(&norm, s->arena.p + off, len)) {
        srt_err_set(c->err, "%s: out of memory", c->t->name);
        return -1;
    }
    int rc = split_added(c, &c->t->trie_norm, norm.p, len, at0, on_norm_segment);
    tok_buf_free(&norm);
    return rc;
}

static void scratch_free(tok_scratch *s)
{
    tok_buf_free(&s->arena);
    tok_buf_free(&s->tmp);
    tok_buf_free(&s->ids);
    free(s->pa);
    free(s->pb);
    if (s->md)
        pcre2_match_data_free(s->md);
    tok_bpe_work_free(&s->bpe);
    free(s->segs);
    memset(s, 0, sizeof(*s));
}

/* One scratch per thread, kept between calls so encoding a short prompt allocates nothing. Buffers that
 * grew past SCRATCH_KEEP for one huge text are released after it. */
#define SCRATCH_KEEP (1u << 20)
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_destroy(void *p)
{
    scratch_free(p);
    free(p);
}

static void scratch_key_init(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_destroy) == 0;
}

static tok_scratch *scratch_get(int *owned)
{
    pthread_once(&scratch_once, scratch_key_init);
    tok_scratch *s = scratch_key_ok ? pthread_getspecific(scratch_key) : NULL;
    *owned = 0;
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return NULL;
        if (!scratch_key_ok || pthread_setspecific(scratch_key, s) != 0)
            *owned = 1; /* no thread slot: the caller frees it */
    }
    s->arena.len = s->tmp.len = s->ids.len = 0;
    s->pa_n = s->pb_n = 0;
    return s;
}

static void scratch_put(tok_scratch *s, int owned)
{
    if (owned) {
        scratch_destroy(s);
        return;
    }
    if (s->arena.cap > SCRATCH_KEEP || s->ids.cap > SCRATCH_KEEP || s->tmp.cap > SCRATCH_KEEP ||
        s->bpe.syms_cap > SCRATCH_KEEP / 16 || s->p_cap > SCRATCH_KEEP / 16)
        scratch_free(s);
}

static int encode_into(const srt_tokenizer *t, const char *text, size_t len, unsigned flags, tok_scratch *s,
                       srt_err *err)
{
    if (!text && len) {
        srt_err_set(err, "%s: NULL text", t->name);
        return SRT_ERROR;
    }
    if (!tok_utf8_valid((const uint8_t *)text, len)) {
        srt_err_set(err, "%s: text is not valid UTF-8", t->name);
        return SRT_ERROR;
    }
    if (!s->md)
        s->md = pcre2_match_data_create(4, NULL);
    if (!s->md) {
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    enc_ctx c = {t, s, flags, s->segs, s->segcap, err};
    int rc = SRT_OK;
    if ((flags & SRT_TOK_ADD_SPECIAL) && t->n_post_pre && push_ids(&s->ids, t->post_pre, (size_t)t->n_post_pre))
        goto oom;
    s->cache_held = pthread_mutex_trylock((pthread_mutex_t *)&t->cache_lock) == 0;
    if (len && split_added(&c, &t->trie_raw, text, len, 1, on_raw_segment))
        rc = SRT_ERROR;
    if (s->cache_held)
        pthread_mutex_unlock((pthread_mutex_t *)&t->cache_lock);
    s->segs = c.segs;
    s->segcap = c.segcap;
    if (rc)
        return rc;
    if ((flags & SRT_TOK_ADD_SPECIAL) && t->n_post_post && push_ids(&s->ids, t->post_post, (size_t)t->n_post_post))
        goto oom;
    return SRT_OK;
oom:
    srt_err_set(err, "%s: out of memory", t->name);
    return SRT_ERROR;
}

int srt_tokenizer_encode(const srt_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t *ids,
                         size_t cap, size_t *n_out, srt_err *err)
{
    int owned;
    tok_scratch *s = scratch_get(&owned);
    *n_out = 0;
    if (!s) {
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    int rc = encode_into(t, text, len, flags, s, err);
    size_t n = s->ids.len / sizeof(int32_t);
    if (rc == SRT_OK) {
        *n_out = n;
        if (n > cap) {
            srt_err_set(err, "%s: the text needs %zu ids, the buffer holds %zu", t->name, n, cap);
            rc = SRT_ERROR;
        } else if (n) {
            memcpy(ids, s->ids.p, n * sizeof(int32_t));
        }
    }
    scratch_put(s, owned);
    return rc;
}

int srt_tokenizer_encode_alloc(const srt_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                               size_t *n_out, srt_err *err)
{
    int owned;
    tok_scratch *s = scratch_get(&owned);
    *ids = NULL;
    *n_out = 0;
    if (!s) {
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    int rc = encode_into(t, text, len, flags, s, err);
    if (rc == SRT_OK) {
        size_t n = s->ids.len / sizeof(int32_t);
        int32_t *v = malloc(n ? n * sizeof(int32_t) : 1);
        if (!v) {
            srt_err_set(err, "%s: out of memory", t->name);
            rc = SRT_ERROR;
        } else {
            if (n)
                memcpy(v, s->ids.p, n * sizeof(int32_t));
            *ids = v;
            *n_out = n;
        }
    }
    scratch_put(s, owned);
    return rc;
}

/* ---------------------------------------------------------------- accessors */

size_t srt_tokenizer_vocab_size(const srt_tokenizer *t) { return t->n_tok; }

const char *srt_tokenizer_token_str(const srt_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_tok || !t->tok[id].str_len) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = t->tok[id].str_len;
    return t->pool.p + t->tok[id].str_off;
}

int32_t srt_tokenizer_token_id(const srt_tokenizer *t, const char *s, size_t len)
{
    return tok_lookup(t, &t->by_str, s, len, 0);
}

int srt_tokenizer_is_special(const srt_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_tok && (t->tok[id].flags & TOKF_SPECIAL);
}

int32_t srt_tokenizer_bos_id(const srt_tokenizer *t) { return t->bos_id; }
int32_t srt_tokenizer_eos_id(const srt_tokenizer *t) { return t->eos_id; }
int32_t srt_tokenizer_pad_id(const srt_tokenizer *t) { return t->pad_id; }
const char *srt_tokenizer_bos_token(const srt_tokenizer *t) { return t->bos_str; }
const char *srt_tokenizer_eos_token(const srt_tokenizer *t) { return t->eos_str; }
int srt_tokenizer_adds_bos(const srt_tokenizer *t) { return t->adds_bos; }
const char *srt_tokenizer_chat_template(const srt_tokenizer *t) { return t->chat_template; }

int srt_tokenizer_load_model(const char *model_path, char *config_path, size_t cap, srt_tokenizer **out,
                             srt_err *err)
{
    struct stat st;
    char tok_path[4096], cfg_path[4096];

    if (config_path && cap)
        config_path[0] = '\0';
    if (stat(model_path, &st) != 0 || !S_ISDIR(st.st_mode))
        return srt_tokenizer_from_gguf(model_path, out, err);
    if (snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", model_path) >= (int)sizeof tok_path
        || snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", model_path) >= (int)sizeof cfg_path)
        return srt_err_set(err, "%s: path too long", model_path);
    if (access(cfg_path, R_OK) != 0)
        return srt_tokenizer_load_json(tok_path, NULL, out, err);
    if (config_path && snprintf(config_path, cap, "%s", cfg_path) >= (int)cap)
        return srt_err_set(err, "%s: path too long", model_path);
    return srt_tokenizer_load_json(tok_path, cfg_path, out, err);
}
