#include <stdlib.h>
#include <string.h>

#include "cache/radix_cache.h"

int srt_radix_init(srt_radix_cache *c, srt_kv_alloc *kv, int disabled, srt_err *err)
{
    memset(c, 0, sizeof *c);
    c->kv = kv;
    c->disabled = disabled;
    c->page_size = kv->page_size;
    c->n_slots = kv->num_pages * kv->page_size;
    c->cap_nodes = kv->num_pages + 1;
    c->tok = malloc(sizeof(int32_t) * (size_t)c->n_slots);
    c->next = malloc(sizeof(int32_t) * (size_t)c->n_slots);
    c->nodes = calloc((size_t)c->cap_nodes, sizeof(srt_radix_node));
    c->free_nodes = malloc(sizeof(int32_t) * (size_t)c->cap_nodes);
    c->heap = malloc(sizeof(int32_t) * (size_t)c->cap_nodes);
    if (!c->tok || !c->next || !c->nodes || !c->free_nodes || !c->heap) {
        srt_radix_destroy(c);
        return srt_err_set(err, "out of memory for a radix cache of %d slots", kv->num_pages);
    }
    for (int32_t i = c->cap_nodes - 1; i >= 1; i--)
        c->free_nodes[c->n_free_nodes++] = i;
    srt_radix_node *root = &c->nodes[SRT_RADIX_ROOT];
    root->parent = root->first_child = root->next_sib = root->prev_sib = SRT_RADIX_NONE;
    root->first_slot = -1;
    root->lock_ref = 1;   /* the root is never evicted */
    root->in_use = 1;
    return SRT_OK;
}

void srt_radix_destroy(srt_radix_cache *c)
{
    free(c->tok);
    free(c->next);
    free(c->nodes);
    free(c->free_nodes);
    free(c->heap);
    memset(c, 0, sizeof *c);
}

static int32_t node_new(srt_radix_cache *c)
{
    if (c->n_free_nodes == 0)
        return SRT_RADIX_NONE;   /* cannot happen: one node per cached page at most */
    int32_t id = c->free_nodes[--c->n_free_nodes];
    srt_radix_node *n = &c->nodes[id];
    memset(n, 0, sizeof *n);
    n->parent = n->first_child = n->next_sib = n->prev_sib = SRT_RADIX_NONE;
    n->first_slot = -1;
    n->in_use = 1;
    return id;
}

static void child_link(srt_radix_cache *c, int32_t parent, int32_t child)
{
    srt_radix_node *p = &c->nodes[parent], *ch = &c->nodes[child];
    ch->parent = parent;
    ch->prev_sib = SRT_RADIX_NONE;
    ch->next_sib = p->first_child;
    if (p->first_child != SRT_RADIX_NONE)
        c->nodes[p->first_child].prev_sib = child;
    p->first_child = child;
    p->n_children++;
}

static void child_unlink(srt_radix_cache *c, int32_t child)
{
    srt_radix_node *ch = &c->nodes[child], *p = &c->nodes[ch->parent];
    if (ch->prev_sib != SRT_RADIX_NONE)
        c->nodes[ch->prev_sib].next_sib = ch->next_sib;
    else
        p->first_child = ch->next_sib;
    if (ch->next_sib != SRT_RADIX_NONE)
        c->nodes[ch->next_sib].prev_sib = ch->prev_sib;
    p->n_children--;
    ch->parent = ch->next_sib = ch->prev_sib = SRT_RADIX_NONE;
}

/* The child whose first page equals key[0..page_size). */
static int32_t find_child(const srt_radix_cache *c, int32_t node, uint64_t ns, const int32_t *key)
{
    for (int32_t ch = c->nodes[node].first_child; ch != SRT_RADIX_NONE; ch = c->nodes[ch].next_sib) {
        int32_t s = c->nodes[ch].first_slot, k = 0;
        if (node == SRT_RADIX_ROOT && c->nodes[ch].ns != ns)
            continue;
        while (k < c->page_size && c->tok[s] == key[k]) {
            s = c->next[s];
            k++;
        }
        if (k == c->page_size)
            return ch;
    }
    return SRT_RADIX_NONE;
}

/* Splits child after k tokens (0 < k < len, page-aligned); returns the new prefix node,
 * which takes the child's place under its parent. */
static int32_t split_node(srt_radix_cache *c, int32_t child, int32_t k)
{
    int32_t id = node_new(c);
    if (id == SRT_RADIX_NONE)
        return SRT_RADIX_NONE;
    srt_radix_node *n = &c->nodes[id], *ch = &c->nodes[child];
    n->parent = ch->parent;
    n->prev_sib = ch->prev_sib;
    n->next_sib = ch->next_sib;
    if (n->prev_sib != SRT_RADIX_NONE)
        c->nodes[n->prev_sib].next_sib = id;
    else
        c->nodes[n->parent].first_child = id;
    if (n->next_sib != SRT_RADIX_NONE)
        c->nodes[n->next_sib].prev_sib = id;
    n->first_slot = ch->first_slot;
    n->len = k;
    n->lock_ref = ch->lock_ref;
    n->last_access = ch->last_access;
    n->ns = ch->ns;
    n->first_child = child;
    n->n_children = 1;
    int32_t s = ch->first_slot;
    for (int32_t i = 0; i < k; i++)
        s = c->next[s];
    ch->first_slot = s;
    ch->len -= k;
    ch->parent = id;
    ch->prev_sib = ch->next_sib = SRT_RADIX_NONE;
    return id;
}

/* Walks key down the tree; returns the matched (page-aligned) length and the node where it
 * ended, splitting a node the match ends inside. out (may be NULL) gets the slots. */
static int32_t walk(srt_radix_cache *c, uint64_t ns, const int32_t *key, int32_t len, int32_t *out,
                    int32_t *last)
{
    int32_t ps = c->page_size, node = SRT_RADIX_ROOT, i = 0;

    len = len / ps * ps;
    c->nodes[node].last_access = ++c->clock;
    while (i < len) {
        int32_t ch = find_child(c, node, ns, key + i);
        if (ch == SRT_RADIX_NONE)
            break;
        srt_radix_node *n = &c->nodes[ch];
        n->last_access = ++c->clock;
        int32_t s = n->first_slot, k = 0;
        while (k < n->len && i + k < len && c->tok[s] == key[i + k]) {
            if (out)
                out[i + k] = s;
            s = c->next[s];
            k++;
        }
        k = k / ps * ps;
        if (k < n->len) {
            int32_t sp = split_node(c, ch, k);
            if (sp == SRT_RADIX_NONE)
                break;
            node = sp;
            i += k;
            break;
        }
        node = ch;
        i += k;
    }
    *last = node;
    return i;
}

int32_t srt_radix_match_prefix_ns(srt_radix_cache *c, uint64_t ns, const int32_t *key,
                                  int32_t len, int32_t *out_slots, int32_t *last_node)
{
    if (c->disabled || len <= 0) {
        *last_node = SRT_RADIX_ROOT;
        return 0;
    }
    return walk(c, ns, key, len, out_slots, last_node);
}

int32_t srt_radix_match_prefix(srt_radix_cache *c, const int32_t *key, int32_t len,
                               int32_t *out_slots, int32_t *last_node)
{
    return srt_radix_match_prefix_ns(c, 0, key, len, out_slots, last_node);
}

int32_t srt_radix_peek_prefix(const srt_radix_cache *c, const int32_t *key, int32_t len)
{
    return srt_radix_peek_prefix_ns(c, 0, key, len);
}

int32_t srt_radix_peek_prefix_ns(const srt_radix_cache *c, uint64_t ns, const int32_t *key,
                                 int32_t len)
{
    int32_t ps = c->page_size, node = SRT_RADIX_ROOT, i = 0;

    if (c->disabled || len <= 0)
        return 0;
    len = len / ps * ps;
    while (i < len) {
        int32_t ch = find_child(c, node, ns, key + i);
        if (ch == SRT_RADIX_NONE)
            break;
        const srt_radix_node *n = &c->nodes[ch];
        int32_t s = n->first_slot, k = 0;
        while (k < n->len && i + k < len && c->tok[s] == key[i + k]) {
            s = c->next[s];
            k++;
        }
        i += k / ps * ps;
        if (k < n->len)
            break;
        node = ch;
    }
    return i;
}

int32_t srt_radix_insert(srt_radix_cache *c, const int32_t *key, const int32_t *slots, int32_t len)
{
    return srt_radix_insert_ns(c, 0, key, slots, len);
}

int32_t srt_radix_insert_ns(srt_radix_cache *c, uint64_t ns, const int32_t *key,
                            const int32_t *slots, int32_t len)
{
    int32_t node, i;

    if (c->disabled || len <= 0)
        return 0;
    len = len / c->page_size * c->page_size;
    i = walk(c, ns, key, len, NULL, &node);
    if (i < len) {
        int32_t id = node_new(c);
        if (id == SRT_RADIX_NONE)
            return i;
        srt_radix_node *n = &c->nodes[id];
        n->first_slot = slots[i];
        n->len = len - i;
        n->ns = ns;
        n->last_access = ++c->clock;
        for (int32_t j = i; j < len; j++) {
            c->tok[slots[j]] = key[j];
            c->next[slots[j]] = j + 1 < len ? slots[j + 1] : -1;
        }
        child_link(c, node, id);
        c->evictable += n->len;
    }
    return i;
}

void srt_radix_inc_lock(srt_radix_cache *c, int32_t node)
{
    for (; node > SRT_RADIX_ROOT; node = c->nodes[node].parent) {
        srt_radix_node *n = &c->nodes[node];
        if (n->lock_ref++ == 0) {
            c->evictable -= n->len;
            c->protected_ += n->len;
        }
    }
}

int srt_radix_dec_lock(srt_radix_cache *c, int32_t node)
{
    for (int32_t x = node; x > SRT_RADIX_ROOT; x = c->nodes[x].parent)
        if (c->nodes[x].lock_ref <= 0) {
            srt_log(SRT_LOG_ERROR, "radix cache: unlocking node %d with lock_ref %d", x,
                    c->nodes[x].lock_ref);
            return SRT_ERROR;
        }
    for (; node > SRT_RADIX_ROOT; node = c->nodes[node].parent) {
        srt_radix_node *n = &c->nodes[node];
        if (--n->lock_ref == 0) {
            c->evictable += n->len;
            c->protected_ -= n->len;
        }
    }
    return SRT_OK;
}

/* ---- eviction: a binary min-heap of leaves on last_access ---- */

static int heap_less(const srt_radix_cache *c, int32_t a, int32_t b)
{
    return c->nodes[a].last_access < c->nodes[b].last_access;
}

static void heap_push(srt_radix_cache *c, int32_t *n, int32_t id)
{
    int32_t i = (*n)++;
    c->heap[i] = id;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!heap_less(c, c->heap[i], c->heap[p]))
            break;
        int32_t t = c->heap[i]; c->heap[i] = c->heap[p]; c->heap[p] = t;
        i = p;
    }
}

static int32_t heap_pop(srt_radix_cache *c, int32_t *n)
{
    int32_t top = c->heap[0], i = 0;
    c->heap[0] = c->heap[--(*n)];
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && heap_less(c, c->heap[l], c->heap[m])) m = l;
        if (r < *n && heap_less(c, c->heap[r], c->heap[m])) m = r;
        if (m == i)
            break;
        int32_t t = c->heap[i]; c->heap[i] = c->heap[m]; c->heap[m] = t;
        i = m;
    }
    return top;
}

static int evictable_leaf(const srt_radix_cache *c, int32_t id)
{
    const srt_radix_node *n = &c->nodes[id];
    return id != SRT_RADIX_ROOT && n->in_use && n->n_children == 0 && n->lock_ref == 0;
}

int64_t srt_radix_evict(srt_radix_cache *c, int64_t num_tokens)
{
    int32_t n_heap = 0;
    int64_t freed = 0;

    if (c->disabled || num_tokens <= 0 || c->evictable == 0)
        return 0;
    for (int32_t i = 1; i < c->cap_nodes; i++)
        if (evictable_leaf(c, i))
            heap_push(c, &n_heap, i);
    while (freed < num_tokens && n_heap > 0) {
        int32_t id = heap_pop(c, &n_heap);
        srt_radix_node *n = &c->nodes[id];
        int32_t parent = n->parent;
        /* Free page by page: a node's slots start every page at a page boundary. */
        int32_t s = n->first_slot;
        for (int32_t i = 0; i < n->len; i++) {
            if (i % c->page_size == 0 && srt_kv_free_slots(c->kv, &s, 1) != SRT_OK)
                srt_log(SRT_LOG_ERROR, "radix cache: freeing slot %d of node %d failed", s, id);
            s = c->next[s];
        }
        freed += n->len;
        c->evictable -= n->len;
        child_unlink(c, id);
        n->in_use = 0;
        c->free_nodes[c->n_free_nodes++] = id;
        if (evictable_leaf(c, parent))
            heap_push(c, &n_heap, parent);
    }
    return freed;
}

int64_t srt_radix_total_size(const srt_radix_cache *c)
{
    int64_t total = 0;
    for (int32_t i = 1; i < c->cap_nodes; i++)
        if (c->nodes[i].in_use)
            total += c->nodes[i].len;
    return total;
}

int srt_radix_check(const srt_radix_cache *c, srt_err *err)
{
    int64_t ev = 0, pr = 0;
    int32_t used = 0;

    for (int32_t i = 1; i < c->cap_nodes; i++) {
        const srt_radix_node *n = &c->nodes[i];
        if (!n->in_use)
            continue;
        used++;
        if (n->lock_ref < 0)
            return srt_err_set(err, "node %d lock_ref %d < 0", i, n->lock_ref);
        if (n->len <= 0 || n->len % c->page_size)
            return srt_err_set(err, "node %d len %d not a positive page multiple", i, n->len);
        if (n->parent < 0 || !c->nodes[n->parent].in_use)
            return srt_err_set(err, "node %d has a dead parent %d", i, n->parent);
        if (n->parent != SRT_RADIX_ROOT && c->nodes[n->parent].lock_ref < n->lock_ref)
            return srt_err_set(err, "node %d lock_ref %d above its parent's %d", i,
                               n->lock_ref, c->nodes[n->parent].lock_ref);
        int32_t kids = 0;
        for (int32_t ch = n->first_child; ch != SRT_RADIX_NONE; ch = c->nodes[ch].next_sib) {
            if (c->nodes[ch].parent != i)
                return srt_err_set(err, "node %d child %d points to parent %d", i, ch,
                                   c->nodes[ch].parent);
            kids++;
        }
        if (kids != n->n_children)
            return srt_err_set(err, "node %d counts %d children, has %d", i, n->n_children, kids);
        if (n->lock_ref > 0) pr += n->len; else ev += n->len;
        int32_t s = n->first_slot;
        for (int32_t k = 0; k < n->len; k++) {
            if (s < 0 || s >= c->n_slots)
                return srt_err_set(err, "node %d slot chain broken at %d", i, k);
            if (k % c->page_size == 0 && c->kv->page_ref[s / c->page_size] == 0)
                return srt_err_set(err, "node %d holds free page %d", i, s / c->page_size);
            if (k % c->page_size != 0 && s % c->page_size == 0)
                return srt_err_set(err, "node %d crosses a page mid-way", i);
            s = c->next[s];
        }
    }
    if (used + c->n_free_nodes + 1 != c->cap_nodes)
        return srt_err_set(err, "node pool leak: %d used + %d free + root != %d", used,
                           c->n_free_nodes, c->cap_nodes);
    if (ev != c->evictable || pr != c->protected_)
        return srt_err_set(err, "sizes: evictable %lld (counted %lld), protected %lld (counted %lld)",
                           (long long)c->evictable, (long long)ev, (long long)c->protected_,
                           (long long)pr);
    return SRT_OK;
}

/* ---- request-level operations ---- */

int32_t srt_radix_match_req(srt_radix_cache *c, const int32_t *tokens, int32_t len,
                            srt_cache_req *r)
{
    int32_t last;
    int32_t m = srt_radix_match_prefix_ns(c, r->ns, tokens, len - 1, r->row, &last);
    r->prefix_len = m;
    r->last_node = last;
    srt_radix_inc_lock(c, last);
    return m;
}

static void release_lock(srt_radix_cache *c, srt_cache_req *r)
{
    if (r->last_node != SRT_RADIX_NONE)
        srt_radix_dec_lock(c, r->last_node);
    r->last_node = SRT_RADIX_NONE;
}

int srt_radix_cache_finished(srt_radix_cache *c, const int32_t *tokens, int32_t kv_len,
                             srt_cache_req *r)
{
    int rc = SRT_OK;

    if (c->disabled) {
        rc = srt_kv_free_slots(c->kv, r->row, kv_len);
        release_lock(c, r);
        r->prefix_len = 0;
        return rc;
    }
    int32_t aligned = kv_len / c->page_size * c->page_size;
    int32_t had = srt_radix_insert_ns(c, r->ns, tokens, r->row, aligned);
    if (had > r->prefix_len)
        rc |= srt_kv_free_slots(c->kv, r->row + r->prefix_len, had - r->prefix_len);
    if (kv_len > aligned)
        rc |= srt_kv_free_slots(c->kv, r->row + aligned, kv_len - aligned);
    release_lock(c, r);
    r->prefix_len = 0;
    return rc ? SRT_ERROR : SRT_OK;
}

int srt_radix_cache_unfinished(srt_radix_cache *c, const int32_t *tokens, int32_t kv_len,
                               srt_cache_req *r)
{
    int rc = SRT_OK;
    int32_t last;

    if (c->disabled)
        return SRT_OK;
    int32_t aligned = kv_len / c->page_size * c->page_size;
    if (aligned <= r->prefix_len)
        return SRT_OK;
    int32_t had = srt_radix_insert_ns(c, r->ns, tokens, r->row, aligned);
    if (had > r->prefix_len)
        rc = srt_kv_free_slots(c->kv, r->row + r->prefix_len, had - r->prefix_len);
    int32_t m = srt_radix_match_prefix_ns(c, r->ns, tokens, aligned, r->row, &last);
    srt_radix_inc_lock(c, last);
    release_lock(c, r);
    r->last_node = last;
    r->prefix_len = m;
    return rc;
}
