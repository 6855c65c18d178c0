/* The srt_forward_hooks file: JSON parsing and type checks.
 *
 * Shape (seed 000, extended with PyTorch's options):
 *   {"forward_hooks":     [spec, ...],
 *    "forward_pre_hooks": [spec, ...]}
 * or a bare [spec, ...] meaning forward_hooks (SGLang's --forward-hooks form), where
 *   spec = {"name": str, "target_modules": [str], "hook_factory": str, "config": {...},
 *           "prepend": bool, "always_call": bool, "with_kwargs": bool, "global": bool}
 * Wrong types are fatal; a missing target_modules or hook_factory is left for the loader
 * to warn about and skip, as SGLang does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_gen.h>
#include <yajl/yajl_tree.h>

#include "hooks/hooks_internal.h"

static const char *json_type_name(yajl_val v)
{
    if (v == NULL)             return "missing";
    if (YAJL_IS_STRING(v))     return "a string";
    if (YAJL_IS_NUMBER(v))     return "a number";
    if (YAJL_IS_OBJECT(v))     return "an object";
    if (YAJL_IS_ARRAY(v))      return "a list";
    if (YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v)) return "a boolean";
    if (YAJL_IS_NULL(v))       return "null";
    return "unknown";
}

static int gen_value(yajl_gen g, yajl_val v)
{
    size_t i;

    if (YAJL_IS_STRING(v))
        return yajl_gen_string(g, (const unsigned char *)v->u.string, strlen(v->u.string));
    if (YAJL_IS_NUMBER(v))
        return yajl_gen_number(g, v->u.number.r, strlen(v->u.number.r));
    if (YAJL_IS_TRUE(v))
        return yajl_gen_bool(g, 1);
    if (YAJL_IS_FALSE(v))
        return yajl_gen_bool(g, 0);
    if (YAJL_IS_NULL(v))
        return yajl_gen_null(g);
    if (YAJL_IS_ARRAY(v)) {
        if (yajl_gen_array_open(g) != yajl_gen_status_ok)
            return -1;
        for (i = 0; i < v->u.array.len; i++)
            if (gen_value(g, v->u.array.values[i]) != yajl_gen_status_ok)
                return -1;
        return yajl_gen_array_close(g);
    }
    if (YAJL_IS_OBJECT(v)) {
        if (yajl_gen_map_open(g) != yajl_gen_status_ok)
            return -1;
        for (i = 0; i < v->u.object.len; i++) {
            const char *k = v->u.object.keys[i];
            if (yajl_gen_string(g, (const unsigned char *)k, strlen(k)) != yajl_gen_status_ok ||
                gen_value(g, v->u.object.values[i]) != yajl_gen_status_ok)
                return -1;
        }
        return yajl_gen_map_close(g);
    }
    return -1;
}

static char *json_text(yajl_val v)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    const unsigned char *buf;
    size_t len;
    char *out = NULL;

    if (g == NULL)
        return NULL;
    if (gen_value(g, v) == yajl_gen_status_ok &&
        yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok) {
        out = malloc(len + 1);
        if (out) {
            memcpy(out, buf, len);
            out[len] = '\0';
        }
    }
    yajl_gen_free(g);
    return out;
}

static int get_bool(yajl_val spec, const char *key, int *out, const char *origin,
                    const char *where, srt_err *err)
{
    const char *path[] = { key, NULL };
    yajl_val v = yajl_tree_get(spec, path, yajl_t_any);

    *out = 0;
    if (v == NULL || YAJL_IS_NULL(v))
        return SRT_OK;
    if (YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v)) {
        *out = YAJL_IS_TRUE(v);
        return SRT_OK;
    }
    return srt_err_set(err, "%s: %s.%s must be true or false, not %s",
                       origin, where, key, json_type_name(v));
}

static const char *const known_fields[] = {
    "name", "target_modules", "hook_factory", "config",
    "prepend", "always_call", "with_kwargs", "global", "per_request", NULL
};

static int parse_spec(yajl_val v, const char *origin, const char *list, int idx, int pre,
                      srt_hook_spec *s, srt_err *err)
{
    const char *pname[] = { "name", NULL }, *ptarget[] = { "target_modules", NULL };
    const char *pfactory[] = { "hook_factory", NULL }, *pconfig[] = { "config", NULL };
    yajl_val name, targets, factory, config;
    char where[96];
    size_t i;

    memset(s, 0, sizeof *s);
    snprintf(where, sizeof where, "%s[%d]", list, idx);
    s->where = strdup(where);
    s->pre = pre;
    if (s->where == NULL)
        return srt_err_set(err, "out of memory");
    if (!YAJL_IS_OBJECT(v))
        return srt_err_set(err, "%s: %s must be an object, not %s",
                           origin, where, json_type_name(v));

    name = yajl_tree_get(v, pname, yajl_t_any);
    if (name != NULL && !YAJL_IS_NULL(name) && !YAJL_IS_STRING(name))
        return srt_err_set(err, "%s: %s.name must be a string, not %s",
                           origin, where, json_type_name(name));
    s->name = strdup(name && YAJL_IS_STRING(name) ? name->u.string : "");
    if (s->name == NULL)
        return srt_err_set(err, "out of memory");

    for (i = 0; i < v->u.object.len; i++) {
        const char *k = v->u.object.keys[i];
        int known = 0;
        for (const char *const *f = known_fields; *f; f++)
            known |= strcmp(*f, k) == 0;
        if (!known)
            srt_log(SRT_LOG_WARN, "Hook spec '%s' (%s: %s) has unknown field '%s', ignored",
                    s->name, origin, where, k);
    }

    if (get_bool(v, "prepend", &s->prepend, origin, where, err) != SRT_OK ||
        get_bool(v, "always_call", &s->always_call, origin, where, err) != SRT_OK ||
        get_bool(v, "with_kwargs", &s->with_kwargs, origin, where, err) != SRT_OK ||
        get_bool(v, "global", &s->global, origin, where, err) != SRT_OK ||
        get_bool(v, "per_request", &s->per_request, origin, where, err) != SRT_OK)
        return SRT_ERROR;
    if (pre && s->always_call)
        return srt_err_set(err, "%s: %s (spec '%s'): 'always_call' applies to forward hooks "
                           "only", origin, where, s->name);

    targets = yajl_tree_get(v, ptarget, yajl_t_any);
    if (targets != NULL && !YAJL_IS_NULL(targets)) {
        if (!YAJL_IS_ARRAY(targets))
            return srt_err_set(err, "%s: %s.target_modules must be a list of module name "
                               "patterns, not %s", origin, where, json_type_name(targets));
        if (s->global && targets->u.array.len > 0)
            return srt_err_set(err, "%s: %s (spec '%s'): a global hook applies to every "
                               "module; remove 'target_modules' or 'global'",
                               origin, where, s->name);
        if (targets->u.array.len > 0) {
            s->patterns = calloc(targets->u.array.len, sizeof *s->patterns);
            if (s->patterns == NULL)
                return srt_err_set(err, "out of memory");
            for (i = 0; i < targets->u.array.len; i++) {
                yajl_val t = targets->u.array.values[i];
                if (!YAJL_IS_STRING(t))
                    return srt_err_set(err, "%s: %s.target_modules[%zu] must be a string, "
                                       "not %s", origin, where, i, json_type_name(t));
                s->patterns[i] = strdup(t->u.string);
                if (s->patterns[i] == NULL)
                    return srt_err_set(err, "out of memory");
                s->n_patterns++;
            }
        }
    }

    factory = yajl_tree_get(v, pfactory, yajl_t_any);
    if (factory != NULL && !YAJL_IS_NULL(factory)) {
        if (!YAJL_IS_STRING(factory))
            return srt_err_set(err, "%s: %s.hook_factory must be a string such as "
                               "\"/path/libx.so:factory\", not %s",
                               origin, where, json_type_name(factory));
        if (factory->u.string[0] != '\0' && (s->factory = strdup(factory->u.string)) == NULL)
            return srt_err_set(err, "out of memory");
    }

    config = yajl_tree_get(v, pconfig, yajl_t_any);
    if (config != NULL && !YAJL_IS_NULL(config) && !YAJL_IS_OBJECT(config))
        return srt_err_set(err, "%s: %s.config must be an object, not %s",
                           origin, where, json_type_name(config));
    s->config_json = config && YAJL_IS_OBJECT(config) ? json_text(config) : strdup("{}");
    if (s->config_json == NULL)
        return srt_err_set(err, "out of memory");
    return SRT_OK;
}

static int parse_list(yajl_val list, const char *origin, const char *key, int pre,
                      srt_hook_spec_list *out, srt_err *err)
{
    srt_hook_spec *grown;
    size_t i;

    if (list == NULL || YAJL_IS_NULL(list))
        return SRT_OK;
    if (!YAJL_IS_ARRAY(list))
        return srt_err_set(err, "%s: %s must be a list of hook specs, not %s",
                           origin, key, json_type_name(list));
    if (list->u.array.len == 0)
        return SRT_OK;
    grown = realloc(out->specs, (out->n + list->u.array.len) * sizeof *grown);
    if (grown == NULL)
        return srt_err_set(err, "out of memory");
    out->specs = grown;
    for (i = 0; i < list->u.array.len; i++) {
        int rc = parse_spec(list->u.array.values[i], origin, key, (int)i, pre,
                            &out->specs[out->n], err);
        out->n++;   /* counted even on failure so the free below releases it */
        if (rc != SRT_OK)
            return SRT_ERROR;
    }
    return SRT_OK;
}

#define SPEC_MAX_DEPTH SRT_JSON_MAX_DEPTH

int srt_hook_spec_parse(const char *json, size_t len, const char *origin,
                        srt_hook_spec_list *out, srt_err *err)
{
    char errbuf[512];
    char *text;
    yajl_val root;
    int rc = SRT_OK;

    memset(out, 0, sizeof *out);
    text = malloc(len + 1);
    if (text == NULL)
        return srt_err_set(err, "out of memory");
    memcpy(text, json, len);
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        return srt_err_set(err, "%s: contains a NUL byte; not a JSON document", origin);
    }
    if (srt_json_depth(text, len) > SPEC_MAX_DEPTH) {
        free(text);
        return srt_err_set(err, "%s: JSON nested deeper than %d levels", origin, SPEC_MAX_DEPTH);
    }
    errbuf[0] = '\0';
    root = yajl_tree_parse(text, errbuf, sizeof errbuf);
    free(text);
    if (root == NULL) {
        /* yajl's message spans lines (context and a caret); keep it on one line. */
        for (char *p = errbuf; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
        return srt_err_set(err, "%s: invalid JSON: %s", origin, errbuf[0] ? errbuf : "parse error");
    }

    if (YAJL_IS_ARRAY(root)) {
        rc = parse_list(root, origin, "forward_hooks", 0, out, err);
    } else if (YAJL_IS_OBJECT(root)) {
        const char *pf[] = { "forward_hooks", NULL }, *pp[] = { "forward_pre_hooks", NULL };
        for (size_t i = 0; i < root->u.object.len; i++) {
            const char *k = root->u.object.keys[i];
            if (strcmp(k, "forward_hooks") != 0 && strcmp(k, "forward_pre_hooks") != 0)
                srt_log(SRT_LOG_WARN, "%s: unknown top-level field '%s' ignored "
                        "(expected 'forward_hooks' and 'forward_pre_hooks')", origin, k);
        }
        rc = parse_list(yajl_tree_get(root, pf, yajl_t_any), origin, "forward_hooks", 0, out, err);
        if (rc == SRT_OK)
            rc = parse_list(yajl_tree_get(root, pp, yajl_t_any), origin, "forward_pre_hooks",
                            1, out, err);
    } else {
        rc = srt_err_set(err, "%s: must be a JSON object {\"forward_hooks\": [...], "
                         "\"forward_pre_hooks\": [...]} or a list of hook specs, not %s",
                         origin, json_type_name(root));
    }
    yajl_tree_free(root);
    if (rc != SRT_OK)
        srt_hook_spec_list_free(out);
    return rc;
}

void srt_hook_spec_list_free(srt_hook_spec_list *l)
{
    for (int i = 0; i < l->n; i++) {
        srt_hook_spec *s = &l->specs[i];
        free(s->name);
        free(s->where);
        for (int j = 0; j < s->n_patterns; j++)
            free(s->patterns[j]);
        free(s->patterns);
        free(s->factory);
        free(s->config_json);
    }
    free(l->specs);
    memset(l, 0, sizeof *l);
}

/* Python's repr() of a str: single quotes unless the text has ' and no ". */
static void repr_str(char **p, const char *s)
{
    char q = (strchr(s, '\'') && !strchr(s, '"')) ? '"' : '\'';
    char *o = *p;

    *o++ = q;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == (unsigned char)q || *c == '\\') {
            *o++ = '\\';
            *o++ = (char)*c;
        } else if (*c == '\n') {
            *o++ = '\\'; *o++ = 'n';
        } else if (*c == '\r') {
            *o++ = '\\'; *o++ = 'r';
        } else if (*c == '\t') {
            *o++ = '\\'; *o++ = 't';
        } else if (*c < 0x20 || *c == 0x7f) {
            o += sprintf(o, "\\x%02x", *c);
        } else {
            *o++ = (char)*c;
        }
    }
    *o++ = q;
    *p = o;
}

char *srt_hook_pylist_repr(char *const *items, int n)
{
    size_t cap = 3;
    char *out, *p;

    for (int i = 0; i < n; i++)
        cap += 4 * strlen(items[i]) + 4;
    out = malloc(cap);
    if (out == NULL)
        return NULL;
    p = out;
    *p++ = '[';
    for (int i = 0; i < n; i++) {
        if (i) {
            *p++ = ',';
            *p++ = ' ';
        }
        repr_str(&p, items[i]);
    }
    *p++ = ']';
    *p = '\0';
    return out;
}
