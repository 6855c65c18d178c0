/* Arena, containers and string buffers used by the chat-template compiler and renderer. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "template/tpl.h"

struct tpl_chunk {
    tpl_chunk *next;
    size_t     size, used;
    _Alignas(16) unsigned char data[];
};

#define CHUNK_MIN (16 * 1024)

void tpl_arena_init(tpl_arena *a, size_t limit)
{
    memset(a, 0, sizeof(*a));
    a->limit = limit;
}

void tpl_arena_free(tpl_arena *a)
{
    tpl_chunk *c = a->head;
    while (c) {
        tpl_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used_total = 0;
}

void *tpl_arena_alloc(tpl_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    tpl_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > CHUNK_MIN ? n : CHUNK_MIN;
        if (c && c->size * 2 > size && c->size < (1u << 20))
            size = c->size * 2;
        if (a->limit && a->used_total + size > a->limit) {
            a->exhausted = true;
            return NULL;
        }
        tpl_chunk *nc = malloc(sizeof(*nc) + size);
        if (!nc) {
            a->exhausted = true;
            return NULL;
        }
        nc->size = size;
        nc->used = 0;
        nc->next = c;
        a->head = nc;
        a->used_total += size;
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

char *tpl_arena_memdup(tpl_arena *a, const char *s, size_t n)
{
    char *p = tpl_arena_alloc(a, n + 1);
    if (!p)
        return NULL;
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

vlist *tpl_list_new(tpl_arena *a, size_t cap)
{
    vlist *l = tpl_arena_alloc(a, sizeof(*l));
    if (!l)
        return NULL;
    l->n = 0;
    l->cap = cap;
    l->v = cap ? tpl_arena_alloc(a, cap * sizeof(val)) : NULL;
    if (cap && !l->v)
        return NULL;
    return l;
}

int tpl_list_push(tpl_arena *a, vlist *l, val v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        val *nv = tpl_arena_alloc(a, cap * sizeof(val));
        if (!nv)
            return -1;
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(val));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

vdict *tpl_dict_new(tpl_arena *a, size_t cap)
{
    vdict *d = tpl_arena_alloc(a, sizeof(*d));
    if (!d)
        return NULL;
    d->n = 0;
    d->cap = cap;
    d->idx = NULL;
    d->idx_cap = d->idx_n = 0;
    d->k = cap ? tpl_arena_alloc(a, cap * sizeof(val)) : NULL;
    d->v = cap ? tpl_arena_alloc(a, cap * sizeof(val)) : NULL;
    if (cap && (!d->k || !d->v))
        return NULL;
    return d;
}

bool tpl_hashable(val v)
{
    return v.t == V_STR || v.t == V_INT || v.t == V_BOOL || v.t == V_FLOAT || v.t == V_NONE || v.t == V_BIGINT ||
           (v.t == V_LIST && v.tuple == 1);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint64_t hash_bytes(const char *s, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

uint64_t tpl_hash(val v)
{
    switch (v.t) {
    case V_STR: return mix(hash_bytes(v.u.s.p, v.u.s.n, 0xcbf29ce484222325ull));
    case V_INT: case V_BOOL: return mix((uint64_t)v.u.i);
    case V_FLOAT:
        /* 1.0 == 1 == True: integral floats hash as the integer */
        if (v.u.f == (double)(int64_t)v.u.f && v.u.f >= -9.2e18 && v.u.f <= 9.2e18)
            return mix((uint64_t)(int64_t)v.u.f);
        {
            uint64_t bits;
            memcpy(&bits, &v.u.f, sizeof(bits));
            return mix(bits ^ 0x5bd1e995u);
        }
    case V_NONE: return 0x9e3779b97f4a7c15ull;
    case V_BIGINT: return mix(hash_bytes(v.u.s.p, v.u.s.n, 0x84222325cbf29ce4ull));
    case V_LIST: {
        uint64_t h = 0x345678;
        for (size_t i = 0; i < v.u.l->n; i++)
            h = mix(h ^ tpl_hash(v.u.l->v[i]));
        return h;
    }
    default: return 0;
    }
}

static bool key_eq(const val *k, val key)
{
    if (key.t == V_STR)
        return k->t == V_STR && k->u.s.n == key.u.s.n && memcmp(k->u.s.p, key.u.s.p, key.u.s.n) == 0;
    return tpl_val_eq(*k, key);
}

static ssize_t dict_find(const vdict *d, val key)
{
    if (d->idx && d->idx_n == d->n && tpl_hashable(key)) {
        size_t mask = d->idx_cap - 1, i = (size_t)tpl_hash(key) & mask;
        for (;;) {
            uint32_t slot = d->idx[i];
            if (slot == 0)
                return -1;
            if (key_eq(&d->k[slot - 1], key))
                return (ssize_t)(slot - 1);
            i = (i + 1) & mask;
        }
    }
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(&d->k[i], key))
            return (ssize_t)i;
    return -1;
}

val *tpl_dict_get(const vdict *d, const char *key, size_t n)
{
    ssize_t i = dict_find(d, v_str(key, n));
    return i < 0 ? NULL : &d->v[i];
}

val *tpl_dict_get_val(const vdict *d, val key)
{
    ssize_t i = dict_find(d, key);
    return i < 0 ? NULL : &d->v[i];
}

static void index_insert(vdict *d, size_t pos)
{
    size_t mask = d->idx_cap - 1, i = (size_t)tpl_hash(d->k[pos]) & mask;
    while (d->idx[i])
        i = (i + 1) & mask;
    d->idx[i] = (uint32_t)(pos + 1);
}

/* (Re)builds the index when it is missing, stale or too full; an unhashable key disables it. */
static int index_refresh(tpl_arena *a, vdict *d)
{
    if (d->n < DICT_INDEX_MIN || d->n > UINT32_MAX / 4)
        return 0;
    if (d->idx && d->idx_n == d->n && d->n * 2 < d->idx_cap)
        return 0;
    for (size_t i = 0; i < d->n; i++)
        if (!tpl_hashable(d->k[i])) {
            d->idx = NULL;
            return 0;
        }
    size_t cap = 64;
    while (cap < d->n * 4)
        cap *= 2;
    uint32_t *idx = tpl_arena_alloc(a, cap * sizeof(uint32_t));
    if (!idx)
        return -1;
    memset(idx, 0, cap * sizeof(uint32_t));
    d->idx = idx;
    d->idx_cap = cap;
    for (size_t i = 0; i < d->n; i++)
        index_insert(d, i);
    d->idx_n = d->n;
    return 0;
}

int tpl_dict_set(tpl_arena *a, vdict *d, val k, val v)
{
    if (index_refresh(a, d))
        return -1;
    ssize_t at = dict_find(d, k);
    if (at >= 0) {
        d->v[at] = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        val *nk = tpl_arena_alloc(a, cap * sizeof(val)), *nv = tpl_arena_alloc(a, cap * sizeof(val));
        if (!nk || !nv)
            return -1;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(val));
            memcpy(nv, d->v, d->n * sizeof(val));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    if (d->idx && d->idx_n == d->n - 1 && tpl_hashable(k) && d->n * 2 < d->idx_cap) {
        index_insert(d, d->n - 1);
        d->idx_n = d->n;
    }
    return 0;
}

void tpl_sb_init(sbuf *b, tpl_arena *a, size_t cap)
{
    b->a = a;
    b->n = 0;
    b->oom = false;
    b->cap = cap ? cap : 64;
    b->p = tpl_arena_alloc(a, b->cap);
    if (!b->p) {
        b->cap = 0;
        b->oom = true;
    }
}

static bool sb_reserve(sbuf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->n + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap * 2;
    while (cap < b->n + extra + 1)
        cap *= 2;
    char *np = tpl_arena_alloc(b->a, cap);
    if (!np) {
        b->oom = true;
        return false;
    }
    memcpy(np, b->p, b->n);
    b->p = np;
    b->cap = cap;
    return true;
}

void tpl_sb_put(sbuf *b, const char *s, size_t n)
{
    if (!n || !sb_reserve(b, n))
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void tpl_sb_putc(sbuf *b, char c)
{
    if (!sb_reserve(b, 1))
        return;
    b->p[b->n++] = c;
    b->p[b->n] = '\0';
}

void tpl_sb_puts(sbuf *b, const char *s)
{
    tpl_sb_put(b, s, strlen(s));
}

void tpl_sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    if ((size_t)k < sizeof(tmp)) {
        tpl_sb_put(b, tmp, (size_t)k);
        return;
    }
    if (!sb_reserve(b, (size_t)k))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}
