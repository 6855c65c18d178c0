/* BPE over one pre-tokenized word: symbols in a linked list, candidate merges in a min-heap keyed by
 * (rank, position), stale heap entries skipped on pop -- the same order HF's BPE merges in. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

void tok_bpe_work_free(tok_bpe_work *w)
{
    free(w->syms);
    free(w->heap);
    memset(w, 0, sizeof(*w));
}

static int reserve(tok_bpe_work *w, size_t n)
{
    if (n <= w->syms_cap)
        return 0;
    size_t cap = w->syms_cap ? w->syms_cap : 64;
    while (cap < n)
        cap *= 2;
    tok_sym *s = realloc(w->syms, cap * sizeof(*s));
    if (!s)
        return -1;
    w->syms = s;
    struct tok_heap_ent *h = realloc(w->heap, cap * 2 * sizeof(*h));
    if (!h)
        return -1;
    w->heap = h;
    w->syms_cap = cap;
    w->heap_cap = cap * 2;
    return 0;
}

/* Each merge pops one entry and pushes at most two, so the heap never exceeds 2n. */
static inline void heap_push(struct tok_heap_ent *h, size_t *n, uint64_t key, int32_t result)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= key)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i].key = key;
    h[i].result = result;
}

static inline struct tok_heap_ent heap_pop(struct tok_heap_ent *h, size_t *n)
{
    struct tok_heap_ent top = h[0];
    struct tok_heap_ent last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m)
            break;
        size_t r = l + 1;
        size_t c = (r < m && h[r].key < h[l].key) ? r : l;
        if (h[c].key >= last.key)
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = last;
    return top;
}

static int add_sym(tok_bpe_work *w, size_t *ns, int32_t id, uint32_t len)
{
    if (reserve(w, *ns + 1))
        return -1;
    w->syms[*ns].id = id;
    w->syms[*ns].len = len;
    (*ns)++;
    return 0;
}

int tok_bpe_word(const srt_tokenizer *t, tok_scratch *s, const char *w, size_t n, tok_buf *ids, srt_err *err)
{
    if (!n)
        return 0;
    tok_cache_slot *slot = NULL;
    if (s->cache_held && n <= TOK_CACHE_WORD) {
        slot = &t->cache[tok_hash(w, n) & (TOK_CACHE_SLOTS - 1)];
        if (slot->len == n && memcmp(slot->word, w, n) == 0)
            return tok_buf_append(ids, slot->ids, slot->n_ids * sizeof(int32_t)) ? -1 : 0;
    }
    size_t first = ids->len / sizeof(int32_t);
    if (t->ignore_merges) {
        int32_t id = tok_lookup(t, &t->by_key, w, n, 1);
        if (id >= 0) {
            if (tok_buf_append(ids, &id, sizeof(id)))
                goto oom;
            goto done;
        }
    }
    tok_bpe_work *wk = &s->bpe;
    size_t ns = 0;
    if (t->byte_level) {
        if (reserve(wk, n))
            goto oom;
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->byte_id[(uint8_t)w[i]];
            if (id < 0)
                id = t->unk_id;
            if (id < 0)
                continue; /* HF drops a symbol it cannot name when there is no unk token */
            wk->syms[ns].id = id;
            wk->syms[ns].len = 1;
            ns++;
        }
    } else {
        int32_t unk = -1;
        uint32_t unk_len = 0;
        for (size_t i = 0; i < n;) {
            size_t l = tok_utf8_len((const uint8_t *)w + i, n - i);
            if (!l)
                l = 1;
            int32_t id;
            uint32_t cp;
            if (l > 1 || (uint8_t)w[i] < 0x80) {
                tok_utf8_decode((const uint8_t *)w + i, &cp);
                id = cp < TOK_CHAR_TABLE ? t->char_id[cp] : tok_lookup(t, &t->by_key, w + i, l, 1);
            } else {
                id = tok_lookup(t, &t->by_key, w + i, l, 1);
            }
            if (id >= 0) {
                if (unk >= 0) {
                    if (add_sym(wk, &ns, unk, unk_len))
                        goto oom;
                    unk = -1;
                }
                if (add_sym(wk, &ns, id, (uint32_t)l))
                    goto oom;
            } else {
                int all = t->byte_fallback;
                for (size_t k = 0; all && k < l; k++)
                    all = t->fallback_id[(uint8_t)w[i + k]] >= 0;
                if (all) {
                    for (size_t k = 0; k < l; k++)
                        if (add_sym(wk, &ns, t->fallback_id[(uint8_t)w[i + k]], 1))
                            goto oom;
                } else if (t->unk_id >= 0) {
                    if (unk >= 0 && t->fuse_unk) {
                        unk_len += (uint32_t)l;
                    } else {
                        if (unk >= 0 && add_sym(wk, &ns, unk, unk_len))
                            goto oom;
                        unk = t->unk_id;
                        unk_len = (uint32_t)l;
                    }
                }
            }
            i += l;
        }
        if (unk >= 0 && add_sym(wk, &ns, unk, unk_len))
            goto oom;
    }
    tok_sym *sy = wk->syms;
    for (size_t i = 0; i < ns; i++) {
        sy[i].prev = (int32_t)i - 1;
        sy[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    struct tok_heap_ent *h = wk->heap;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        const struct tok_merge *m = tok_find_merge(t, sy[i].id, sy[i + 1].id);
        if (m)
            heap_push(h, &hn, ((uint64_t)m->rank << 32) | i, m->result);
    }
    while (hn) {
        struct tok_heap_ent top = heap_pop(h, &hn);
        uint32_t pos = (uint32_t)top.key;
        tok_sym *cur = &sy[pos];
        if (cur->len == 0 || cur->next < 0)
            continue;
        tok_sym *right = &sy[cur->next];
        const struct tok_merge *m = tok_find_merge(t, cur->id, right->id);
        if (!m || m->result != top.result)
            continue; /* stale */
        cur->id = top.result;
        cur->len += right->len;
        right->len = 0;
        cur->next = right->next;
        if (cur->next >= 0)
            sy[cur->next].prev = (int32_t)pos;
        if (cur->prev >= 0) {
            const struct tok_merge *pm = tok_find_merge(t, sy[cur->prev].id, cur->id);
            if (pm)
                heap_push(h, &hn, ((uint64_t)pm->rank << 32) | (uint32_t)cur->prev, pm->result);
        }
        if (cur->next >= 0) {
            const struct tok_merge *nm = tok_find_merge(t, cur->id, sy[cur->next].id);
            if (nm)
                heap_push(h, &hn, ((uint64_t)nm->rank << 32) | pos, nm->result);
        }
    }
    if (tok_buf_reserve(ids, ns * sizeof(int32_t) + 1))
        goto oom;
    for (int32_t i = ns ? 0 : -1; i >= 0; i = sy[i].next) {
        memcpy(ids->p + ids->len, &sy[i].id, sizeof(int32_t));
        ids->len += sizeof(int32_t);
    }
done:
    if (slot) {
        size_t k = ids->len / sizeof(int32_t) - first;
        if (k <= TOK_CACHE_IDS) {
            slot->len = (uint8_t)n;
            memcpy(slot->word, w, n);
            slot->n_ids = (uint8_t)k;
            memcpy(slot->ids, ids->p + first * sizeof(int32_t), k * sizeof(int32_t));
        }
    }
    return 0;
oom:
    srt_err_set(err, "%s: out of memory", t->name);
    return -1;
}
