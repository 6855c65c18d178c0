/* Arena, containers and string buffers used by the chat-template compiler and renderer. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    d->k = cap ? tpl_arena_alloc(a, cap * sizeof(val)) : NULL;
    d->v = cap ? tpl_arena_alloc(a, cap * sizeof(val)) : NULL;
    if (cap && (!d->k || !d->v))
        return NULL;
    return d;
}

val *tpl_dict_get(const vdict *d, const char *key, size_t n)
{
    for (size_t i = 0; i < d->n; i++) {
        const val *k = &d->k[i];
        if (k->t == V_STR && k->u.s.n == n && memcmp(k->u.s.p, key, n) == 0)
            return &d->v[i];
    }
    return NULL;
}

val *tpl_dict_get_val(const vdict *d, val key)
{
    if (key.t == V_STR)
        return tpl_dict_get(d, key.u.s.p, key.u.s.n);
    for (size_t i = 0; i < d->n; i++)
        if (tpl_val_eq(d->k[i], key))
            return &d->v[i];
    return NULL;
}

int tpl_dict_set(tpl_arena *a, vdict *d, val k, val v)
{
    /* Big objects from request JSON skip the duplicate-key scan: it would be quadratic. */
    if (d->n <= 64) {
        val *old = tpl_dict_get_val(d, k);
        if (old) {
            *old = v;
            return 0;
        }
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
