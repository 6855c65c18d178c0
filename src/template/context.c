/* The render context: a JSON object parsed with yajl's callback parser straight into arena values
 * (no intermediate tree), plus loading template sources from tokenizer_config.json or a file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>
#include <yajl/yajl_tree.h>

#include "srt/chat_template.h"
#include "template/tpl.h"

#define MAX_JSON_DEPTH 256

typedef struct jctx {
    render *r;
    val    *stack;          /* open containers and their pending keys; grow with the nesting */
    val    *keys;
    int     cap;
    int     depth;
    val     root;
    bool    have_root;
    bool    oom, too_deep;
} jctx;

static int add_value(jctx *j, val v)
{
    if (j->depth == 0) {
        j->root = v;
        j->have_root = true;
        return 1;
    }
    val *top = &j->stack[j->depth - 1];
    int rc = top->t == V_LIST ? tpl_list_push(&j->r->a, top->u.l, v) : tpl_dict_set(&j->r->a, top->u.d, j->keys[j->depth - 1], v);
    if (rc) {
        j->oom = true;
        return 0;
    }
    return 1;
}

static int cb_null(void *ctx)
{
    return add_value(ctx, v_none());
}

static int cb_bool(void *ctx, int b)
{
    return add_value(ctx, v_bool(b));
}

static int cb_number(void *ctx, const char *s, size_t n)
{
    jctx *j = ctx;
    char buf[64];
    if (n >= sizeof(buf)) {
        char *text = tpl_arena_memdup(&j->r->a, s, n);
        if (!text) {
            j->oom = true;
            return 0;
        }
        if (memchr(s, '.', n) || memchr(s, 'e', n) || memchr(s, 'E', n))
            return add_value(j, v_float(strtod(text, NULL)));
        val big = {0};
        big.t = V_BIGINT;
        big.u.s.p = text;
        big.u.s.n = n;
        return add_value(j, big);
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!memchr(s, '.', n) && !memchr(s, 'e', n) && !memchr(s, 'E', n)) {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno == 0)
            return add_value(j, v_int(v));
        char *text = tpl_arena_memdup(&j->r->a, s, n);
        if (!text) {
            j->oom = true;
            return 0;
        }
        val big = {0};
        big.t = V_BIGINT;
        big.u.s.p = text;
        big.u.s.n = n;
        return add_value(j, big);
    }
    return add_value(j, v_float(strtod(buf, NULL)));
}

static int cb_string(void *ctx, const unsigned char *s, size_t n)
{
    jctx *j = ctx;
    char *p = tpl_arena_memdup(&j->r->a, (const char *)s, n);
    if (!p) {
        j->oom = true;
        return 0;
    }
    return add_value(j, v_str(p, n));
}

static int open_container(jctx *j, val v)
{
    if (j->depth >= MAX_JSON_DEPTH) {
        j->too_deep = true;
        return 0;
    }
    if (j->depth == j->cap) {
        int cap = j->cap * 2;
        val *ns = tpl_arena_alloc(&j->r->a, (size_t)cap * sizeof(val));
        val *nk = tpl_arena_alloc(&j->r->a, (size_t)cap * sizeof(val));
        if (!ns || !nk) {
            j->oom = true;
            return 0;
        }
        memcpy(ns, j->stack, (size_t)j->depth * sizeof(val));
        memcpy(nk, j->keys, (size_t)j->depth * sizeof(val));
        j->stack = ns;
        j->keys = nk;
        j->cap = cap;
    }
    if (!add_value(j, v))
        return 0;
    j->stack[j->depth++] = v;
    return 1;
}

static int cb_start_map(void *ctx)
{
    jctx *j = ctx;
    vdict *d = tpl_dict_new(&j->r->a, 0);
    if (!d) {
        j->oom = true;
        return 0;
    }
    return open_container(j, (val){.t = V_DICT, .u.d = d});
}

static int cb_map_key(void *ctx, const unsigned char *s, size_t n)
{
    jctx *j = ctx;
    char *p = tpl_arena_memdup(&j->r->a, (const char *)s, n);
    if (!p) {
        j->oom = true;
        return 0;
    }
    j->keys[j->depth - 1] = v_str(p, n);
    return 1;
}

static int cb_end(void *ctx)
{
    jctx *j = ctx;
    j->depth--;
    return 1;
}

static int cb_start_array(void *ctx)
{
    jctx *j = ctx;
    vlist *l = tpl_list_new(&j->r->a, 0);
    if (!l) {
        j->oom = true;
        return 0;
    }
    return open_container(j, (val){.t = V_LIST, .u.l = l});
}

/* yajl's own buffers come from the render arena too: no malloc per request beyond the arena's chunks. */
static void *ya_malloc(void *ctx, size_t n)
{
    size_t *p = tpl_arena_alloc(ctx, n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    return (char *)p + 16;
}

static void *ya_realloc(void *ctx, void *old, size_t n)
{
    if (!old)
        return ya_malloc(ctx, n);
    size_t oldn = *(size_t *)((char *)old - 16);
    if (n <= oldn)
        return old;
    void *p = ya_malloc(ctx, n);
    if (p)
        memcpy(p, old, oldn);
    return p;
}

static void ya_free(void *ctx, void *p)
{
    (void)ctx;
    (void)p;
}

static const yajl_callbacks CALLBACKS = {
    cb_null, cb_bool, NULL, NULL, cb_number, cb_string, cb_start_map, cb_map_key, cb_end, cb_start_array, cb_end,
};

/* transformers' _alias_reasoning_fields: a message's reasoning, under whichever of reasoning_content,
 * thinking or reasoning it came, is offered as "thinking" (first key when new) and "reasoning_content"
 * (last key when new), since templates read one or the other. Idempotent. Only the first 64 keys of a
 * message are checked for duplicates (tpl_dict_set), far more than any message has. */
static int alias_reasoning(render *r, vdict *ctx)
{
    static const char *const fields[] = {"reasoning_content", "thinking", "reasoning"};
    val *msgs = tpl_dict_get(ctx, "messages", 8);
    if (!msgs || msgs->t != V_LIST)
        return 0;
    for (size_t i = 0; i < msgs->u.l->n; i++) {
        val *m = &msgs->u.l->v[i];
        if (m->t != V_DICT)
            return tpl_rerr(r, "TypeError: Chat messages should be dicts, but message %zu is a %s", i, tpl_py_type_name(*m));
        val *reason = NULL;
        for (int f = 0; f < 3 && !reason; f++) {
            val *v = tpl_dict_get(m->u.d, fields[f], strlen(fields[f]));
            if (v && v->t != V_NONE)
                reason = v;
        }
        if (!reason)
            continue;
        /* {"thinking": r, **message, "reasoning_content": r}: "thinking" always ends up first */
        val rv = *reason;
        vdict *d = m->u.d;
        val *own = tpl_dict_get(d, "thinking", 8);
        vdict *nd = tpl_dict_new(&r->a, d->n + 2);
        if (!nd)
            return tpl_rerr(r, "out of memory");
        nd->k[0] = v_str("thinking", 8);
        nd->v[0] = own ? *own : rv;
        nd->n = 1;
        for (size_t k = 0; k < d->n; k++) {
            if (&d->v[k] == own)
                continue;
            nd->k[nd->n] = d->k[k];
            nd->v[nd->n++] = d->v[k];
        }
        d = nd;
        m->u.d = d;
        if (tpl_dict_set(&r->a, d, v_str("reasoning_content", 17), rv))
            return tpl_rerr(r, "out of memory");
    }
    return 0;
}

int tpl_parse_context(render *r, const char *json, size_t len, vdict **out)
{
    if (!json) {
        *out = tpl_dict_new(&r->a, 0);
        return *out ? 0 : tpl_rerr(r, "out of memory");
    }
    jctx *j = tpl_arena_alloc(&r->a, sizeof(*j));
    if (!j)
        return tpl_rerr(r, "out of memory");
    /* the stacks are written before they are read: only the scalars need clearing */
    j->r = r;
    j->depth = 0;
    j->cap = 8;
    j->stack = tpl_arena_alloc(&r->a, 8 * sizeof(val));
    j->keys = tpl_arena_alloc(&r->a, 8 * sizeof(val));
    if (!j->stack || !j->keys)
        return tpl_rerr(r, "out of memory");
    j->have_root = j->oom = j->too_deep = false;
    yajl_alloc_funcs af = {ya_malloc, ya_realloc, ya_free, &r->a};
    yajl_handle h = yajl_alloc(&CALLBACKS, &af, j);
    if (!h)
        return tpl_rerr(r, "out of memory");
    yajl_status st = yajl_parse(h, (const unsigned char *)json, len);
    if (st == yajl_status_ok)
        st = yajl_complete_parse(h);
    int rc = 0;
    if (j->oom)
        rc = tpl_rerr(r, "chat template context: out of memory");
    else if (j->too_deep)
        rc = tpl_rerr(r, "chat template context: JSON nested deeper than %d", MAX_JSON_DEPTH);
    else if (st != yajl_status_ok) {
        unsigned char *msg = yajl_get_error(h, 0, (const unsigned char *)json, len);
        rc = tpl_rerr(r, "chat template context: invalid JSON: %s", msg ? (const char *)msg : "parse error");
        if (msg)
            yajl_free_error(h, msg);
    } else if (!j->have_root || j->root.t != V_DICT)
        rc = tpl_rerr(r, "chat template context: must be a JSON object");
    yajl_free(h);
    if (rc == 0) {
        *out = j->root.u.d;
        rc = alias_reasoning(r, *out);
    }
    return rc;
}

/* ----------------------------------------------------------------------------------- template sources */

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static yajl_val parse_tree(const char *json, size_t len, srt_err *err)
{
    char *z = dup_n(json, len); /* yajl_tree wants a NUL-terminated buffer */
    if (!z) {
        srt_err_set(err, "out of memory");
        return NULL;
    }
    char ebuf[256];
    ebuf[0] = '\0';
    yajl_val root = yajl_tree_parse(z, ebuf, sizeof(ebuf));
    free(z);
    if (!root)
        srt_err_set(err, "tokenizer_config.json: invalid JSON: %s", ebuf[0] ? ebuf : "parse error");
    return root;
}

static yajl_val obj_get(yajl_val obj, const char *key)
{
    if (!YAJL_IS_OBJECT(obj))
        return NULL;
    for (size_t i = 0; i < obj->u.object.len; i++)
        if (strcmp(obj->u.object.keys[i], key) == 0)
            return obj->u.object.values[i];
    return NULL;
}

int srt_chat_template_from_tokenizer_config(const char *json, size_t len, const char *name, char **out,
                                            size_t *out_len, srt_err *err)
{
    *out = NULL;
    yajl_val root = parse_tree(json, len, err);
    if (!root)
        return SRT_ERROR;
    const char *want = name ? name : "default";
    yajl_val ct = obj_get(root, "chat_template");
    const char *src = NULL;
    if (YAJL_IS_STRING(ct)) {
        if (name && strcmp(name, "default") != 0) {
            srt_err_set(err, "tokenizer_config.json: chat_template is a single template, no template named '%s'",
                        name);
            yajl_tree_free(root);
            return SRT_ERROR;
        }
        src = ct->u.string;
    } else if (YAJL_IS_ARRAY(ct)) {
        for (size_t i = 0; i < ct->u.array.len && !src; i++) {
            yajl_val item = ct->u.array.values[i];
            yajl_val n = obj_get(item, "name"), t = obj_get(item, "template");
            if (YAJL_IS_STRING(n) && YAJL_IS_STRING(t) && strcmp(n->u.string, want) == 0)
                src = t->u.string;
        }
        if (!src) {
            srt_err_set(err, "tokenizer_config.json: no chat template named '%s'", want);
            yajl_tree_free(root);
            return SRT_ERROR;
        }
    } else {
        srt_err_set(err, "tokenizer_config.json has no chat_template");
        yajl_tree_free(root);
        return SRT_ERROR;
    }
    /* yajl strings are NUL-terminated; a template with an embedded NUL is cut there, which no real one has */
    size_t n = strlen(src);
    *out = dup_n(src, n);
    yajl_tree_free(root);
    if (!*out) {
        srt_err_set(err, "out of memory");
        return SRT_ERROR;
    }
    if (out_len)
        *out_len = n;
    return SRT_OK;
}

int srt_tokenizer_config_token(const char *json, size_t len, const char *key, char **out, srt_err *err)
{
    *out = NULL;
    yajl_val root = parse_tree(json, len, err);
    if (!root)
        return SRT_ERROR;
    yajl_val v = obj_get(root, key);
    if (YAJL_IS_OBJECT(v))
        v = obj_get(v, "content");
    if (!YAJL_IS_STRING(v)) {
        srt_err_set(err, "tokenizer_config.json: no string '%s'", key);
        yajl_tree_free(root);
        return SRT_ERROR;
    }
    *out = dup_n(v->u.string, strlen(v->u.string));
    yajl_tree_free(root);
    if (!*out) {
        srt_err_set(err, "out of memory");
        return SRT_ERROR;
    }
    return SRT_OK;
}

int srt_chat_template_read_file(const char *path, char **out, size_t *out_len, srt_err *err)
{
    srt_err e;
    if (srt_read_file(path, 64u << 20, out, out_len, &e) != SRT_OK)
        return srt_err_set(err, "chat template file %s", e.msg);
    return SRT_OK;
}
