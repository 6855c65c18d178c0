/* Loading HF tokenizer.json (+ tokenizer_config.json). Anything the encoder does not implement fails
 * here, naming the file and the field, never later at request time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#include "tok/tok_internal.h"

#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static yajl_val obj_get(yajl_val o, const char *key)
{
    if (!o || !YAJL_IS_OBJECT(o))
        return NULL;
    for (size_t i = 0; i < o->u.object.len; i++)
        if (strcmp(o->u.object.keys[i], key) == 0)
            return o->u.object.values[i];
    return NULL;
}

static const char *get_str(yajl_val o, const char *key)
{
    yajl_val v = obj_get(o, key);
    return (v && YAJL_IS_STRING(v)) ? YAJL_GET_STRING(v) : NULL;
}

/* -1 absent/null, else 0/1 */
static int get_bool(yajl_val o, const char *key, int dflt)
{
    yajl_val v = obj_get(o, key);
    if (!v || YAJL_IS_NULL(v))
        return dflt;
    return YAJL_IS_TRUE(v) ? 1 : 0;
}

static int is_null(yajl_val v) { return !v || YAJL_IS_NULL(v); }

int tok_read_file(const char *path, char **buf, size_t *len, srt_err *err)
{
    return srt_read_file(path, (size_t)1 << 30, buf, len, err);
}

/* ---------------------------------------------------------------- pipeline parsing */

static int add_norm(srt_tokenizer *t, tok_norm nm)
{
    tok_norm *p = realloc(t->norms, sizeof(*p) * (size_t)(t->n_norms + 1));
    if (!p)
        return -1;
    t->norms = p;
    t->norms[t->n_norms++] = nm;
    return 0;
}

static int parse_normalizer(srt_tokenizer *t, yajl_val v, srt_err *err)
{
    if (is_null(v))
        return SRT_OK;
    const char *type = get_str(v, "type");
    if (!type) {
        srt_err_set(err, "%s: normalizer without a \"type\"", t->name);
        return SRT_ERROR;
    }
    if (!strcmp(type, "Sequence")) {
        yajl_val list = obj_get(v, "normalizers");
        if (!list || !YAJL_IS_ARRAY(list)) {
            srt_err_set(err, "%s: normalizer Sequence without a \"normalizers\" array", t->name);
            return SRT_ERROR;
        }
        for (size_t i = 0; i < list->u.array.len; i++)
            if (parse_normalizer(t, list->u.array.values[i], err))
                return SRT_ERROR;
        return SRT_OK;
    }
    tok_norm nm;
    memset(&nm, 0, sizeof(nm));
    if (!strcmp(type, "NFC")) {
        nm.kind = NORM_NFC;
    } else if (!strcmp(type, "NFKC")) {
        nm.kind = NORM_NFKC;
    } else if (!strcmp(type, "Prepend")) {
        const char *s = get_str(v, "prepend");
        if (!s) {
            srt_err_set(err, "%s: normalizer Prepend without \"prepend\"", t->name);
            return SRT_ERROR;
        }
        nm.kind = NORM_PREPEND;
        nm.a = tok_strdup(s);
        nm.alen = strlen(s);
    } else if (!strcmp(type, "Replace")) {
        const char *pat = get_str(obj_get(v, "pattern"), "String");
        const char *content = get_str(v, "content");
        if (!pat || !content) {
            srt_err_set(err, "%s: normalizer Replace: only {\"String\": ...} patterns with a \"content\" are "
                             "supported", t->name);
            return SRT_ERROR;
        }
        nm.kind = NORM_REPLACE;
        nm.a = tok_strdup(pat);
        nm.alen = strlen(pat);
        nm.b = tok_strdup(content);
        nm.blen = strlen(content);
    } else if (!strcmp(type, "Strip")) {
        nm.kind = NORM_STRIP;
        nm.left = get_bool(v, "strip_left", 1);
        nm.right = get_bool(v, "strip_right", 1);
    } else {
        srt_err_set(err, "%s: normalizer type \"%s\" is not supported (supported: NFC, NFKC, Prepend, "
                         "Replace, Strip, Sequence)", t->name, type);
        return SRT_ERROR;
    }
    if (add_norm(t, nm)) {
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    return SRT_OK;
}

static tok_pretok *new_pretok(srt_tokenizer *t)
{
    tok_pretok *p = realloc(t->pretoks, sizeof(*p) * (size_t)(t->n_pretoks + 1));
    if (!p)
        return NULL;
    t->pretoks = p;
    memset(&p[t->n_pretoks], 0, sizeof(*p));
    return &p[t->n_pretoks++];
}

static int parse_metaspace_scheme(srt_tokenizer *t, yajl_val v, const char *what, srt_err *err)
{
    const char *scheme = get_str(v, "prepend_scheme");
    if (scheme) {
        if (!strcmp(scheme, "always"))
            return 2;
        if (!strcmp(scheme, "first"))
            return 1;
        if (!strcmp(scheme, "never"))
            return 0;
        srt_err_set(err, "%s: %s Metaspace: unknown prepend_scheme \"%s\"", t->name, what, scheme);
        return -1;
    }
    return get_bool(v, "add_prefix_space", 1) ? 2 : 0;
}

static int parse_pretokenizer(srt_tokenizer *t, yajl_val v, srt_err *err)
{
    if (is_null(v))
        return SRT_OK;
    const char *type = get_str(v, "type");
    if (!type) {
        srt_err_set(err, "%s: pre_tokenizer without a \"type\"", t->name);
        return SRT_ERROR;
    }
    if (!strcmp(type, "Sequence")) {
        yajl_val list = obj_get(v, "pretokenizers");
        if (!list || !YAJL_IS_ARRAY(list)) {
            srt_err_set(err, "%s: pre_tokenizer Sequence without a \"pretokenizers\" array", t->name);
            return SRT_ERROR;
        }
        for (size_t i = 0; i < list->u.array.len; i++)
            if (parse_pretokenizer(t, list->u.array.values[i], err))
                return SRT_ERROR;
        return SRT_OK;
    }
    if (t->byte_level) {
        srt_err_set(err, "%s: pre_tokenizer %s after ByteLevel is not supported", t->name, type);
        return SRT_ERROR;
    }
    tok_pretok *p = new_pretok(t);
    if (!p) {
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    char where[512];
    snprintf(where, sizeof(where), "%s: pre_tokenizer %s", t->name, type);
    if (!strcmp(type, "Split")) {
        p->kind = PRE_SPLIT;
        yajl_val pat = obj_get(v, "pattern");
        const char *re = get_str(pat, "Regex"), *lit = get_str(pat, "String");
        if (re) {
            if (tok_compile_regex(p, re, where, err))
                return SRT_ERROR;
        } else if (lit && *lit) {
            p->lit = tok_strdup(lit);
            p->lit_len = strlen(lit);
        } else {
            srt_err_set(err, "%s: missing \"pattern\" {\"Regex\"|\"String\"}", where);
            return SRT_ERROR;
        }
        const char *beh = get_str(v, "behavior");
        static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        p->behavior = -1;
        for (int i = 0; beh && i < 5; i++)
            if (!strcmp(beh, names[i]))
                p->behavior = i;
        if (p->behavior < 0) {
            srt_err_set(err, "%s: unknown \"behavior\" %s", where, beh ? beh : "(missing)");
            return SRT_ERROR;
        }
        p->invert = get_bool(v, "invert", 0);
    } else if (!strcmp(type, "ByteLevel")) {
        p->kind = PRE_BYTELEVEL;
        p->add_prefix_space = get_bool(v, "add_prefix_space", 1);
        p->behavior = SPLIT_ISOLATED;
        if (get_bool(v, "use_regex", 1) && tok_compile_regex(p, GPT2_PATTERN, where, err))
            return SRT_ERROR;
        t->byte_level = 1;
    } else if (!strcmp(type, "Digits")) {
        /* Rust's char::is_numeric is the N categories */
        p->kind = PRE_DIGITS;
        p->individual = get_bool(v, "individual_digits", 0);
        p->behavior = SPLIT_ISOLATED;
        if (tok_compile_numeric(p, p->individual, where, err))
            return SRT_ERROR;
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = PRE_METASPACE;
        const char *r = get_str(v, "replacement");
        if (!r)
            r = "\xe2\x96\x81";
        p->repl_len = strlen(r);
        if (p->repl_len == 0 || p->repl_len >= sizeof(p->repl)) {
            srt_err_set(err, "%s: bad \"replacement\"", where);
            return SRT_ERROR;
        }
        memcpy(p->repl, r, p->repl_len);
        p->prepend = parse_metaspace_scheme(t, v, "pre_tokenizer", err);
        if (p->prepend < 0)
            return SRT_ERROR;
        p->split = get_bool(v, "split", 1);
    } else {
        t->n_pretoks--;
        srt_err_set(err, "%s: pre_tokenizer type \"%s\" is not supported (supported: Split, ByteLevel, Digits, "
                         "Metaspace, Sequence)", t->name, type);
        return SRT_ERROR;
    }
    return SRT_OK;
}

static int add_decop(srt_tokenizer *t, int kind, const char *a, const char *b)
{
    tok_decop *p = realloc(t->decops, sizeof(*p) * (size_t)(t->n_decops + 1));
    if (!p)
        return -1;
    t->decops = p;
    tok_decop *d = &p[t->n_decops++];
    memset(d, 0, sizeof(*d));
    d->kind = kind;
    d->a = tok_strdup(a);
    d->alen = a ? strlen(a) : 0;
    d->b = tok_strdup(b);
    d->blen = b ? strlen(b) : 0;
    return 0;
}

typedef struct dec_state {
    int fused, has_fallback, has_bytelevel, n_steps;
} dec_state;

static int parse_decoder(srt_tokenizer *t, yajl_val v, dec_state *ds, srt_err *err)
{
    const char *type = get_str(v, "type");
    if (!type) {
        srt_err_set(err, "%s: decoder without a \"type\"", t->name);
        return SRT_ERROR;
    }
    if (!strcmp(type, "Sequence")) {
        yajl_val list = obj_get(v, "decoders");
        if (!list || !YAJL_IS_ARRAY(list)) {
            srt_err_set(err, "%s: decoder Sequence without a \"decoders\" array", t->name);
            return SRT_ERROR;
        }
        for (size_t i = 0; i < list->u.array.len; i++)
            if (parse_decoder(t, list->u.array.values[i], ds, err))
                return SRT_ERROR;
        return SRT_OK;
    }
    if (ds->has_bytelevel) {
        srt_err_set(err, "%s: decoder %s after ByteLevel is not supported", t->name, type);
        return SRT_ERROR;
    }
    int per_token = !strcmp(type, "Replace") || !strcmp(type, "Metaspace") || !strcmp(type, "ByteLevel");
    if (per_token && (ds->has_fallback || ds->fused || t->dec_strip)) {
        srt_err_set(err, "%s: decoder %s after ByteFallback/Fuse/Strip is not supported", t->name, type);
        return SRT_ERROR;
    }
    int rc = 0;
    if (!strcmp(type, "ByteLevel")) {
        if (ds->n_steps) {
            srt_err_set(err, "%s: decoder ByteLevel after other decoders is not supported", t->name);
            return SRT_ERROR;
        }
        rc = add_decop(t, DECOP_BYTELEVEL, NULL, NULL);
        ds->has_bytelevel = 1;
    } else if (!strcmp(type, "Replace")) {
        const char *pat = get_str(obj_get(v, "pattern"), "String");
        const char *content = get_str(v, "content");
        if (!pat || !content) {
            srt_err_set(err, "%s: decoder Replace: only {\"String\": ...} patterns with a \"content\" are "
                             "supported", t->name);
            return SRT_ERROR;
        }
        rc = add_decop(t, DECOP_REPLACE, pat, content);
    } else if (!strcmp(type, "ByteFallback")) {
        rc = add_decop(t, DECOP_BYTEFALLBACK, NULL, NULL);
        ds->has_fallback = 1;
    } else if (!strcmp(type, "Fuse")) {
        ds->fused = 1; /* concatenation is what the detokenizer does anyway */
    } else if (!strcmp(type, "Strip")) {
        const char *content = get_str(v, "content");
        yajl_val start = obj_get(v, "start"), stop = obj_get(v, "stop");
        if (!content || !YAJL_IS_INTEGER(start) || !YAJL_IS_INTEGER(stop)) {
            srt_err_set(err, "%s: decoder Strip needs \"content\", \"start\" and \"stop\"", t->name);
            return SRT_ERROR;
        }
        if (YAJL_GET_INTEGER(stop) != 0 || !ds->fused || t->dec_strip) {
            srt_err_set(err, "%s: decoder Strip is supported only after Fuse with stop=0", t->name);
            return SRT_ERROR;
        }
        uint32_t cp;
        size_t l = tok_utf8_len((const uint8_t *)content, strlen(content));
        if (!l || l != strlen(content)) {
            srt_err_set(err, "%s: decoder Strip \"content\" must be one character", t->name);
            return SRT_ERROR;
        }
        tok_utf8_decode((const uint8_t *)content, &cp);
        long long n = YAJL_GET_INTEGER(start);
        if (n < 0 || n > 1000) {
            srt_err_set(err, "%s: decoder Strip \"start\" out of range", t->name);
            return SRT_ERROR;
        }
        t->dec_strip = STRIP_TEXT;
        t->dec_strip_n = (uint32_t)n;
        t->dec_strip_cp = cp;
    } else if (!strcmp(type, "Metaspace")) {
        const char *r = get_str(v, "replacement");
        if (!r)
            r = "\xe2\x96\x81";
        if (!*r || strlen(r) >= sizeof(t->dec_repl)) {
            srt_err_set(err, "%s: decoder Metaspace: bad \"replacement\"", t->name);
            return SRT_ERROR;
        }
        int scheme = parse_metaspace_scheme(t, v, "decoder", err);
        if (scheme < 0)
            return SRT_ERROR;
        rc = add_decop(t, DECOP_METASPACE, r, " ");
        if (scheme) {
            t->dec_strip = STRIP_FIRST_TOKEN_REPL;
            memcpy(t->dec_repl, r, strlen(r));
            t->dec_repl_len = strlen(r);
        }
    } else {
        srt_err_set(err, "%s: decoder type \"%s\" is not supported (supported: ByteLevel, Metaspace, Replace, "
                         "ByteFallback, Fuse, Strip, Sequence)", t->name, type);
        return SRT_ERROR;
    }
    ds->n_steps++;
    if (rc) {
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    return SRT_OK;
}

static int append_ids(int32_t **arr, int *n, yajl_val ids)
{
    for (size_t i = 0; i < ids->u.array.len; i++) {
        yajl_val x = ids->u.array.values[i];
        if (!YAJL_IS_INTEGER(x))
            return -1;
        if (YAJL_GET_INTEGER(x) < 0 || YAJL_GET_INTEGER(x) > (1 << 24))
            return -1;
        int32_t *p = realloc(*arr, sizeof(int32_t) * (size_t)(*n + 1));
        if (!p)
            return -1;
        *arr = p;
        p[(*n)++] = (int32_t)YAJL_GET_INTEGER(x);
    }
    return 0;
}

static int parse_post_processor(srt_tokenizer *t, yajl_val v, srt_err *err)
{
    if (is_null(v))
        return SRT_OK;
    const char *type = get_str(v, "type");
    if (!type) {
        srt_err_set(err, "%s: post_processor without a \"type\"", t->name);
        return SRT_ERROR;
    }
    if (!strcmp(type, "Sequence")) {
        yajl_val list = obj_get(v, "processors");
        if (!list || !YAJL_IS_ARRAY(list)) {
            srt_err_set(err, "%s: post_processor Sequence without a \"processors\" array", t->name);
            return SRT_ERROR;
        }
        for (size_t i = 0; i < list->u.array.len; i++)
            if (parse_post_processor(t, list->u.array.values[i], err))
                return SRT_ERROR;
        return SRT_OK;
    }
    if (!strcmp(type, "ByteLevel"))
        return SRT_OK; /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) {
        yajl_val single = obj_get(v, "single"), specials = obj_get(v, "special_tokens");
        if (!single || !YAJL_IS_ARRAY(single)) {
            srt_err_set(err, "%s: post_processor TemplateProcessing without a \"single\" array", t->name);
            return SRT_ERROR;
        }
        int seen_seq = 0;
        for (size_t i = 0; i < single->u.array.len; i++) {
            yajl_val item = single->u.array.values[i];
            yajl_val sp = obj_get(item, "SpecialToken");
            if (obj_get(item, "Sequence")) {
                seen_seq = 1;
                continue;
            }
            const char *name = get_str(sp, "id");
            yajl_val ids = obj_get(obj_get(specials, name ? name : ""), "ids");
            if (!name || !ids || !YAJL_IS_ARRAY(ids)) {
                srt_err_set(err, "%s: post_processor TemplateProcessing: special token %s has no \"ids\" in "
                                 "\"special_tokens\"", t->name, name ? name : "(unnamed)");
                return SRT_ERROR;
            }
            if (append_ids(seen_seq ? &t->post_post : &t->post_pre, seen_seq ? &t->n_post_post : &t->n_post_pre,
                           ids)) {
                srt_err_set(err, "%s: post_processor TemplateProcessing: bad ids for %s", t->name, name);
                return SRT_ERROR;
            }
        }
        return SRT_OK;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        yajl_val cls = obj_get(v, "cls"), sep = obj_get(v, "sep");
        if (!cls || !sep || !YAJL_IS_ARRAY(cls) || !YAJL_IS_ARRAY(sep) || cls->u.array.len != 2 ||
            sep->u.array.len != 2 || !YAJL_IS_INTEGER(cls->u.array.values[1]) ||
            !YAJL_IS_INTEGER(sep->u.array.values[1])) {
            srt_err_set(err, "%s: post_processor %s needs \"cls\" and \"sep\" [token, id]", t->name, type);
            return SRT_ERROR;
        }
        int32_t c = (int32_t)YAJL_GET_INTEGER(cls->u.array.values[1]);
        int32_t s = (int32_t)YAJL_GET_INTEGER(sep->u.array.values[1]);
        t->post_pre = malloc(sizeof(int32_t));
        t->post_post = malloc(sizeof(int32_t));
        if (!t->post_pre || !t->post_post) {
            srt_err_set(err, "%s: out of memory", t->name);
            return SRT_ERROR;
        }
        t->post_pre[0] = c;
        t->post_post[0] = s;
        t->n_post_pre = t->n_post_post = 1;
        return SRT_OK;
    }
    srt_err_set(err, "%s: post_processor type \"%s\" is not supported (supported: TemplateProcessing, "
                     "ByteLevel, RobertaProcessing, BertProcessing, Sequence)", t->name, type);
    return SRT_ERROR;
}

/* ---------------------------------------------------------------- model */

static int parse_model(srt_tokenizer *t, yajl_val m, srt_err *err)
{
    if (!m || !YAJL_IS_OBJECT(m)) {
        srt_err_set(err, "%s: missing \"model\" object", t->name);
        return SRT_ERROR;
    }
    const char *type = get_str(m, "type");
    if (type && strcmp(type, "BPE")) {
        srt_err_set(err, "%s: model type \"%s\" is not supported (only BPE)", t->name, type);
        return SRT_ERROR;
    }
    yajl_val vocab = obj_get(m, "vocab"), merges = obj_get(m, "merges");
    if (!vocab || !YAJL_IS_OBJECT(vocab)) {
        srt_err_set(err, "%s: model.vocab is missing or not an object", t->name);
        return SRT_ERROR;
    }
    if (!merges || !YAJL_IS_ARRAY(merges)) {
        srt_err_set(err, "%s: model.merges is missing or not an array", t->name);
        return SRT_ERROR;
    }
    const char *cs = get_str(m, "continuing_subword_prefix"), *ew = get_str(m, "end_of_word_suffix");
    if ((cs && *cs) || (ew && *ew)) {
        srt_err_set(err, "%s: model.continuing_subword_prefix / end_of_word_suffix are not supported", t->name);
        return SRT_ERROR;
    }
    yajl_val dropout = obj_get(m, "dropout");
    if (!is_null(dropout) && !(YAJL_IS_NUMBER(dropout) && YAJL_GET_DOUBLE(dropout) == 0.0) &&
        !(YAJL_IS_INTEGER(dropout) && YAJL_GET_INTEGER(dropout) == 0)) {
        srt_err_set(err, "%s: model.dropout is set; BPE dropout makes encoding random and is not supported",
                    t->name);
        return SRT_ERROR;
    }
    t->byte_fallback = get_bool(m, "byte_fallback", 0);
    t->fuse_unk = get_bool(m, "fuse_unk", 0);
    t->ignore_merges = get_bool(m, "ignore_merges", 0);
    for (size_t i = 0; i < vocab->u.object.len; i++) {
        yajl_val id = vocab->u.object.values[i];
        if (!YAJL_IS_INTEGER(id)) {
            srt_err_set(err, "%s: model.vocab[\"%s\"] is not an integer id", t->name, vocab->u.object.keys[i]);
            return SRT_ERROR;
        }
        const char *k = vocab->u.object.keys[i];
        long long idv = YAJL_GET_INTEGER(id);
        if (idv < 0 || idv > (1 << 24)) {
            srt_err_set(err, "%s: model.vocab[\"%s\"]: token id %lld out of range", t->name, k, idv);
            return SRT_ERROR;
        }
        if (tok_add_token(t, (int32_t)idv, k, strlen(k), TOKF_IN_MODEL, err))
            return SRT_ERROR;
    }
    return SRT_OK;
}

/* Merges are resolved after finish (the keys must be final); ids come from the string map. */
static int parse_merges(srt_tokenizer *t, yajl_val merges, srt_err *err)
{
    if (tok_alloc_merges(t, merges->u.array.len, err))
        return SRT_ERROR;
    for (size_t i = 0; i < merges->u.array.len; i++) {
        yajl_val mv = merges->u.array.values[i];
        const char *a, *b;
        size_t alen, blen;
        if (YAJL_IS_STRING(mv)) {
            const char *s = YAJL_GET_STRING(mv);
            const char *sp = strchr(s + (s[0] ? 1 : 0), ' '); /* the first space after one character */
            if (!sp) {
                srt_err_set(err, "%s: model.merges[%zu] \"%s\" is not \"left right\"", t->name, i, s);
                return SRT_ERROR;
            }
            a = s;
            alen = (size_t)(sp - s);
            b = sp + 1;
            blen = strlen(b);
        } else if (YAJL_IS_ARRAY(mv) && mv->u.array.len == 2 && YAJL_IS_STRING(mv->u.array.values[0]) &&
                   YAJL_IS_STRING(mv->u.array.values[1])) {
            a = YAJL_GET_STRING(mv->u.array.values[0]);
            b = YAJL_GET_STRING(mv->u.array.values[1]);
            alen = strlen(a);
            blen = strlen(b);
        } else {
            srt_err_set(err, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", t->name, i);
            return SRT_ERROR;
        }
        char stack[256];
        char *ab = alen + blen <= sizeof(stack) ? stack : malloc(alen + blen);
        if (!ab) {
            srt_err_set(err, "%s: out of memory", t->name);
            return SRT_ERROR;
        }
        memcpy(ab, a, alen);
        memcpy(ab + alen, b, blen);
        int32_t ia = tok_lookup(t, &t->by_str, a, alen, 0);
        int32_t ib = tok_lookup(t, &t->by_str, b, blen, 0);
        int32_t ir = tok_lookup(t, &t->by_str, ab, alen + blen, 0);
        if (ab != stack)
            free(ab);
        /* merges refer to model tokens; an added token with the same string shares the id */
        if (ia < 0 || ib < 0 || ir < 0) {
            srt_err_set(err, "%s: model.merges[%zu] (\"%.*s\" \"%.*s\") uses a token missing from model.vocab",
                        t->name, i, (int)alen, a, (int)blen, b);
            return SRT_ERROR;
        }
        if (tok_add_merge(t, ia, ib, ir, (uint32_t)i, err))
            return SRT_ERROR;
    }
    return SRT_OK;
}

static int parse_added(srt_tokenizer *t, yajl_val added, srt_err *err)
{
    if (is_null(added))
        return SRT_OK;
    if (!YAJL_IS_ARRAY(added)) {
        srt_err_set(err, "%s: added_tokens is not an array", t->name);
        return SRT_ERROR;
    }
    for (size_t i = 0; i < added->u.array.len; i++) {
        yajl_val a = added->u.array.values[i];
        yajl_val id = obj_get(a, "id");
        const char *content = get_str(a, "content");
        if (!id || !YAJL_IS_INTEGER(id) || !content) {
            srt_err_set(err, "%s: added_tokens[%zu] needs an integer \"id\" and a string \"content\"", t->name, i);
            return SRT_ERROR;
        }
        if (!*content)
            continue;
        int special = get_bool(a, "special", 0);
        uint16_t fl = TOKF_ADDED;
        if (special)
            fl |= TOKF_SPECIAL;
        if (get_bool(a, "normalized", !special))
            fl |= TOKF_NORMALIZED;
        if (get_bool(a, "lstrip", 0))
            fl |= TOKF_LSTRIP;
        if (get_bool(a, "rstrip", 0))
            fl |= TOKF_RSTRIP;
        if (get_bool(a, "single_word", 0)) {
            srt_err_set(err, "%s: added_tokens[%zu] (\"%s\") uses single_word, which is not supported", t->name, i,
                        content);
            return SRT_ERROR;
        }
        if (YAJL_GET_INTEGER(id) < 0 || YAJL_GET_INTEGER(id) > (1 << 24)) {
            srt_err_set(err, "%s: added_tokens[%zu]: id %lld out of range", t->name, i, YAJL_GET_INTEGER(id));
            return SRT_ERROR;
        }
        int32_t idv = (int32_t)YAJL_GET_INTEGER(id);
        /* an added token that is also a model token keeps its model key */
        uint16_t keep = 0;
        if (idv >= 0 && (uint32_t)idv < t->n_tok && (t->tok[idv].flags & TOKF_IN_MODEL) &&
            t->tok[idv].str_len == strlen(content) && !memcmp(t->pool.p + t->tok[idv].str_off, content, strlen(content)))
            keep = TOKF_IN_MODEL;
        if (tok_add_token(t, idv, content, strlen(content), fl, err))
            return SRT_ERROR;
        t->tok[idv].flags |= keep;
    }
    return SRT_OK;
}

/* bos_token & co. are a string or an AddedToken dict {"content": ...}. */
static const char *config_token(yajl_val cfg, const char *key)
{
    yajl_val v = obj_get(cfg, key);
    if (v && YAJL_IS_STRING(v))
        return YAJL_GET_STRING(v);
    return get_str(v, "content");
}

static int parse_config(srt_tokenizer *t, const char *cfg_json, size_t cfg_len, const char *name, srt_err *err)
{
    char ebuf[256];
    if (srt_json_depth(cfg_json, cfg_len) > SRT_JSON_MAX_DEPTH) {
        srt_err_set(err, "%s: JSON nested deeper than %d levels", name, SRT_JSON_MAX_DEPTH);
        return SRT_ERROR;
    }
    yajl_val cfg = yajl_tree_parse(cfg_json, ebuf, sizeof(ebuf));
    if (!cfg) {
        srt_err_set(err, "%s: invalid JSON: %s", name, ebuf);
        return SRT_ERROR;
    }
    int rc = SRT_OK;
    if (!YAJL_IS_OBJECT(cfg)) {
        srt_err_set(err, "%s: not a JSON object", name);
        rc = SRT_ERROR;
        goto out;
    }
    const char *keys[3] = {"bos_token", "eos_token", "pad_token"};
    for (int k = 0; k < 3; k++) {
        const char *s = config_token(cfg, keys[k]);
        if (!s)
            continue;
        int32_t id = tok_lookup(t, &t->by_str, s, strlen(s), 0);
        if (id < 0) {
            srt_err_set(err, "%s: %s \"%s\" is not a token of the vocabulary", name, keys[k], s);
            rc = SRT_ERROR;
            goto out;
        }
        if (k == 0) {
            t->bos_id = id;
            t->bos_str = tok_strdup(s);
        } else if (k == 1) {
            t->eos_id = id;
            t->eos_str = tok_strdup(s);
        } else {
            t->pad_id = id;
        }
    }
    yajl_val ct = obj_get(cfg, "chat_template");
    if (ct && YAJL_IS_STRING(ct)) {
        t->chat_template = tok_strdup(YAJL_GET_STRING(ct));
    } else if (ct && YAJL_IS_ARRAY(ct)) {
        for (size_t i = 0; i < ct->u.array.len; i++) {
            yajl_val e = ct->u.array.values[i];
            const char *nm = get_str(e, "name"), *tpl = get_str(e, "template");
            if (nm && tpl && !strcmp(nm, "default"))
                t->chat_template = tok_strdup(tpl);
        }
        if (!t->chat_template) {
            srt_err_set(err, "%s: chat_template is a list without a \"default\" entry", name);
            rc = SRT_ERROR;
            goto out;
        }
    } else if (ct && !YAJL_IS_NULL(ct)) {
        srt_err_set(err, "%s: chat_template is neither a string nor a list", name);
        rc = SRT_ERROR;
        goto out;
    }
out:
    yajl_tree_free(cfg);
    return rc;
}

int srt_tokenizer_load_json_mem(const char *json, size_t len, const char *config_json, size_t config_len,
                                const char *name, srt_tokenizer **out, srt_err *err)
{
    *out = NULL;
    char ebuf[256];
    /* the walks over normalizer/pre_tokenizer/decoder trees recurse */
    if (srt_json_depth(json, len) > SRT_JSON_MAX_DEPTH) {
        srt_err_set(err, "%s: JSON nested deeper than %d levels", name, SRT_JSON_MAX_DEPTH);
        return SRT_ERROR;
    }
    yajl_val root = yajl_tree_parse(json, ebuf, sizeof(ebuf));
    if (!root) {
        srt_err_set(err, "%s: invalid JSON: %s", name, ebuf);
        return SRT_ERROR;
    }
    srt_tokenizer *t = tok_new(name);
    if (!t) {
        yajl_tree_free(root);
        srt_err_set(err, "%s: out of memory", name);
        return SRT_ERROR;
    }
    int rc = SRT_ERROR;
    if (!YAJL_IS_OBJECT(root)) {
        srt_err_set(err, "%s: not a JSON object", name);
        goto out;
    }
    yajl_val model = obj_get(root, "model");
    if (parse_model(t, model, err) || parse_added(t, obj_get(root, "added_tokens"), err) ||
        parse_normalizer(t, obj_get(root, "normalizer"), err) ||
        parse_pretokenizer(t, obj_get(root, "pre_tokenizer"), err) ||
        parse_post_processor(t, obj_get(root, "post_processor"), err))
        goto out;
    yajl_val dec = obj_get(root, "decoder");
    if (is_null(dec)) {
        t->dec_join_space = 1;
    } else {
        dec_state ds = {0};
        if (parse_decoder(t, dec, &ds, err))
            goto out;
    }
    const char *unk = get_str(model, "unk_token");
    if (tok_finish(t, err))
        goto out;
    if (unk) {
        t->unk_id = tok_lookup(t, &t->by_str, unk, strlen(unk), 0);
        if (t->unk_id < 0) {
            srt_err_set(err, "%s: model.unk_token \"%s\" is not in the vocabulary", name, unk);
            goto out;
        }
    }
    if (parse_merges(t, obj_get(model, "merges"), err))
        goto out;
    for (int k = 0; k < t->n_post_pre + t->n_post_post; k++) {
        int32_t id = k < t->n_post_pre ? t->post_pre[k] : t->post_post[k - t->n_post_pre];
        if (!srt_tokenizer_token_str(t, id, NULL)) {
            srt_err_set(err, "%s: post_processor adds token id %d, which is not in the vocabulary", name, id);
            goto out;
        }
    }
    if (config_json && parse_config(t, config_json, config_len, "tokenizer_config.json", err))
        goto out;
    if (t->n_post_pre && t->bos_id >= 0 && t->post_pre[0] == t->bos_id)
        t->adds_bos = 1;
    else if (t->n_post_pre && t->bos_id < 0) {
        t->adds_bos = 1;
        t->bos_id = t->post_pre[0];
        size_t l;
        const char *s = srt_tokenizer_token_str(t, t->bos_id, &l);
        t->bos_str = s ? tok_strndup(s, l) : NULL;
    }
    rc = SRT_OK;
out:
    yajl_tree_free(root);
    if (rc) {
        srt_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return SRT_OK;
}

int srt_tokenizer_load_json(const char *path, const char *config_path, srt_tokenizer **out, srt_err *err)
{
    char *buf = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    *out = NULL;
    if (!path) {
        srt_err_set(err, "no tokenizer.json path given");
        return SRT_ERROR;
    }
    if (tok_read_file(path, &buf, &len, err))
        return SRT_ERROR;
    if (config_path && tok_read_file(config_path, &cfg, &cfg_len, err)) {
        free(buf);
        return SRT_ERROR;
    }
    int rc = srt_tokenizer_load_json_mem(buf, len, cfg, cfg_len, path, out, err);
    if (rc && cfg && strstr(err->msg, "tokenizer_config.json:") == err->msg) {
        /* name the actual config file */
        char msg[sizeof(err->msg)];
        snprintf(msg, sizeof(msg), "%s", err->msg + strlen("tokenizer_config.json:"));
        srt_err_set(err, "%s:%s", config_path, msg);
    }
    free(buf);
    free(cfg);
    return rc;
}

/* The GGUF loader describes its pipeline in tokenizer.json terms so both loaders share one parser. */
int tok_setup_pipeline(srt_tokenizer *t, const char *normalizer, const char *pre_tokenizer, const char *decoder,
                       srt_err *err)
{
    const char *src[3] = {normalizer, pre_tokenizer, decoder};
    for (int i = 0; i < 3; i++) {
        if (!src[i])
            continue;
        char ebuf[256];
        yajl_val v = NULL;
        if (srt_json_depth(src[i], strlen(src[i])) > SRT_JSON_MAX_DEPTH)
            snprintf(ebuf, sizeof ebuf, "nested deeper than %d levels", SRT_JSON_MAX_DEPTH);
        else
            v = yajl_tree_parse(src[i], ebuf, sizeof(ebuf));
        if (!v) {
            srt_err_set(err, "%s: internal pipeline description: %s", t->name, ebuf);
            return SRT_ERROR;
        }
        dec_state ds = {0};
        int rc = i == 0 ? parse_normalizer(t, v, err) : i == 1 ? parse_pretokenizer(t, v, err)
                                                               : parse_decoder(t, v, &ds, err);
        yajl_tree_free(v);
        if (rc)
            return rc;
    }
    return SRT_OK;
}
