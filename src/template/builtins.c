#define _GNU_SOURCE
/* Filters, tests, methods and globals: the part of jinja2's and Python's library that chat templates use.
 * Names are resolved to ids at compile time; an unknown name is a compile error there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/tpl.h"

/* ------------------------------------------------------------------------------------------ name tables */

enum {
    F_ABS = 1, F_ATTR, F_BATCH, F_CAPITALIZE, F_CENTER, F_COUNT, F_DEFAULT, F_DICTSORT, F_ESCAPE, F_FIRST,
    F_FLOAT, F_FORMAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN,
    F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SLICE, F_SORT,
    F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT,
};

static const struct { const char *name; int id; } FILTERS[] = {
    {"abs", F_ABS}, {"attr", F_ATTR}, {"batch", F_BATCH}, {"capitalize", F_CAPITALIZE}, {"center", F_CENTER},
    {"count", F_COUNT}, {"d", F_DEFAULT}, {"default", F_DEFAULT}, {"dictsort", F_DICTSORT}, {"e", F_ESCAPE},
    {"escape", F_ESCAPE}, {"forceescape", F_ESCAPE}, {"first", F_FIRST}, {"float", F_FLOAT},
    {"format", F_FORMAT}, {"indent", F_INDENT}, {"int", F_INT}, {"items", F_ITEMS}, {"join", F_JOIN},
    {"last", F_LAST}, {"length", F_LENGTH}, {"list", F_LIST}, {"lower", F_LOWER}, {"map", F_MAP},
    {"max", F_MAX}, {"min", F_MIN}, {"reject", F_REJECT}, {"rejectattr", F_REJECTATTR}, {"replace", F_REPLACE},
    {"reverse", F_REVERSE}, {"round", F_ROUND}, {"safe", F_SAFE}, {"select", F_SELECT},
    {"selectattr", F_SELECTATTR}, {"slice", F_SLICE}, {"sort", F_SORT}, {"string", F_STRING}, {"sum", F_SUM},
    {"title", F_TITLE}, {"tojson", F_TOJSON}, {"trim", F_TRIM}, {"unique", F_UNIQUE}, {"upper", F_UPPER},
    {"wordcount", F_WORDCOUNT}, {NULL, 0},
};

enum {
    T_BOOLEAN = 1, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_ESCAPED, T_EVEN, T_FALSE, T_FLOAT, T_GE, T_GT,
    T_IN, T_INTEGER, T_ITERABLE, T_LE, T_LOWER, T_LT, T_MAPPING, T_NE, T_NONE, T_NUMBER, T_ODD, T_SAMEAS,
    T_SEQUENCE, T_STRING, T_TRUE, T_UNDEFINED, T_UPPER, T_FILTER, T_TEST,
};

static const struct { const char *name; int id; } TESTS[] = {
    {"boolean", T_BOOLEAN}, {"callable", T_CALLABLE}, {"defined", T_DEFINED}, {"divisibleby", T_DIVISIBLEBY},
    {"eq", T_EQ}, {"equalto", T_EQ}, {"==", T_EQ}, {"escaped", T_ESCAPED}, {"even", T_EVEN}, {"false", T_FALSE},
    {"float", T_FLOAT}, {"ge", T_GE}, {">=", T_GE}, {"gt", T_GT}, {">", T_GT}, {"greaterthan", T_GT},
    {"in", T_IN}, {"integer", T_INTEGER}, {"iterable", T_ITERABLE}, {"le", T_LE}, {"<=", T_LE},
    {"lower", T_LOWER}, {"lt", T_LT}, {"<", T_LT}, {"lessthan", T_LT}, {"mapping", T_MAPPING}, {"ne", T_NE},
    {"!=", T_NE}, {"none", T_NONE}, {"number", T_NUMBER}, {"odd", T_ODD}, {"sameas", T_SAMEAS},
    {"sequence", T_SEQUENCE}, {"string", T_STRING}, {"true", T_TRUE}, {"undefined", T_UNDEFINED},
    {"upper", T_UPPER}, {"filter", T_FILTER}, {"test", T_TEST}, {NULL, 0},
};

enum {
    M_STRIP = 1, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH, M_REPLACE,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_FIND, M_RFIND, M_INDEX, M_RINDEX, M_COUNT, M_JOIN, M_ISDIGIT,
    M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISLOWER, M_ISUPPER, M_GET, M_ITEMS, M_KEYS, M_VALUES, M_CYCLE,
};

static const struct { const char *name; int id; } METHODS[] = {
    {"strip", M_STRIP}, {"lstrip", M_LSTRIP}, {"rstrip", M_RSTRIP}, {"split", M_SPLIT}, {"rsplit", M_RSPLIT},
    {"splitlines", M_SPLITLINES}, {"startswith", M_STARTSWITH}, {"endswith", M_ENDSWITH},
    {"replace", M_REPLACE}, {"upper", M_UPPER}, {"lower", M_LOWER}, {"title", M_TITLE},
    {"capitalize", M_CAPITALIZE}, {"find", M_FIND}, {"rfind", M_RFIND}, {"index", M_INDEX},
    {"rindex", M_RINDEX}, {"count", M_COUNT}, {"join", M_JOIN}, {"isdigit", M_ISDIGIT}, {"isalpha", M_ISALPHA},
    {"isalnum", M_ISALNUM}, {"isspace", M_ISSPACE}, {"islower", M_ISLOWER}, {"isupper", M_ISUPPER},
    {"get", M_GET}, {"items", M_ITEMS}, {"keys", M_KEYS}, {"values", M_VALUES}, {"cycle", M_CYCLE},
    {NULL, 0},
};

static const struct { const char *name; int id; } FUNCTIONS[] = {
    {"range", FN_RANGE}, {"namespace", FN_NAMESPACE}, {"dict", FN_DICT}, {"raise_exception", FN_RAISE},
    {"strftime_now", FN_STRFTIME}, {NULL, 0},
};

#define LOOKUP(table)                                                                                          \
    for (int i = 0; table[i].name; i++)                                                                        \
        if (strlen(table[i].name) == n && memcmp(table[i].name, name, n) == 0)                                 \
            return table[i].id;                                                                                \
    return 0;

int tpl_filter_lookup(const char *name, size_t n) { LOOKUP(FILTERS) }
int tpl_test_lookup(const char *name, size_t n) { LOOKUP(TESTS) }
int tpl_method_lookup(const char *name, size_t n) { LOOKUP(METHODS) }
int tpl_function_lookup(const char *name, size_t n) { LOOKUP(FUNCTIONS) }

/* ------------------------------------------------------------------------------------------- helpers */

static int oom(render *r)
{
    r->a.exhausted = true;
    return tpl_rerr(r, "out of memory");
}

static int to_s(render *r, val v, const char **p, size_t *n)
{
    val s;
    if (tpl_val_to_str(r, v, &s))
        return -1;
    *p = s.u.s.p;
    *n = s.u.s.n;
    return 0;
}

static val mk_list(vlist *l, bool tuple)
{
    val v = {0};
    v.t = V_LIST;
    v.tuple = tuple;
    v.u.l = l;
    return v;
}

static bool arg_bool(cargs *a, int pos, const char *name, bool dflt)
{
    val v;
    return tpl_get_arg(a, pos, name, &v) ? tpl_truthy(v) : dflt;
}

static int arg_int(render *r, cargs *a, int pos, const char *name, int64_t dflt, int64_t *out)
{
    val v;
    *out = dflt;
    if (!tpl_get_arg(a, pos, name, &v) || v.t == V_NONE)
        return 0;
    if (v.t == V_INT || v.t == V_BOOL) {
        *out = v.u.i;
        return 0;
    }
    if (v.t == V_FLOAT) {
        *out = (int64_t)v.u.f;
        return 0;
    }
    return tpl_rerr(r, "TypeError: '%s' object cannot be interpreted as an integer", tpl_py_type_name(v));
}

static int arg_str(render *r, cargs *a, int pos, const char *name, const char **p, size_t *n, bool *present)
{
    val v;
    *present = false;
    if (!tpl_get_arg(a, pos, name, &v) || v.t == V_NONE)
        return 0;
    if (v.t != V_STR)
        return tpl_rerr(r, "TypeError: %s argument must be str, not %s", name, tpl_py_type_name(v));
    *p = v.u.s.p;
    *n = v.u.s.n;
    *present = true;
    return 0;
}

static int str_new(render *r, sbuf *b, val *out)
{
    if (b->oom)
        return oom(r);
    *out = v_str(b->p, b->n);
    return 0;
}

static void put_cp(sbuf *b, uint32_t cp)
{
    char u[4];
    if (cp < 0x80) {
        tpl_sb_putc(b, (char)cp);
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        tpl_sb_put(b, u, 2);
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        tpl_sb_put(b, u, 3);
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        tpl_sb_put(b, u, 4);
    }
}

static int change_case(render *r, const char *s, size_t n, int mode, val *out)
{
    sbuf b;
    tpl_sb_init(&b, &r->a, TPL_CASE_MAX_GROWTH * n + 1);
    if (b.oom || b.cap < TPL_CASE_MAX_GROWTH * n)
        return oom(r);
    b.n = tpl_case_map(s, n, mode, b.p);
    return str_new(r, &b, out);
}

/* str.strip family; chars NULL means whitespace. */
static val do_strip(const char *s, size_t n, const char *chars, size_t cn, bool left, bool right)
{
    size_t st = 0, en = n;
    if (!chars) {
        size_t k;
        if (left)
            while (st < en && (k = tpl_u8_space_at(s + st, en - st)) != 0)
                st += k;
        if (right)
            while (en > st && (k = tpl_u8_space_before(s + st, en - st)) != 0)
                en -= k;
        return v_str(s + st, en - st);
    }
    bool ascii = tpl_u8_is_ascii(chars, cn);
    if (left)
        while (st < en) {
            size_t adv;
            if (ascii) {
                if (!memchr(chars, s[st], cn))
                    break;
                st++;
                continue;
            }
            tpl_u8_decode(s + st, en - st, &adv);
            if (!memmem(chars, cn, s + st, adv))
                break;
            st += adv;
        }
    if (right)
        while (en > st) {
            size_t b = en - 1;
            while (b > st && ((unsigned char)s[b] & 0xC0) == 0x80)
                b--;
            if (!memmem(chars, cn, s + b, en - b))
                break;
            en = b;
        }
    return v_str(s + st, en - st);
}

static int do_split(render *r, const char *s, size_t n, const char *sep, size_t sn, bool has_sep, int64_t maxsplit,
                    bool from_right, val *out)
{
    vlist *l = tpl_list_new(&r->a, 4);
    if (!l)
        return oom(r);
    if (has_sep && sn == 0)
        return tpl_rerr(r, "ValueError: empty separator");
    if (!has_sep) {
        /* runs of whitespace; no empty strings */
        if (!from_right) {
            size_t i = 0, k;
            int64_t splits = 0;
            for (;;) {
                while (i < n && (k = tpl_u8_space_at(s + i, n - i)) != 0)
                    i += k;
                if (i >= n)
                    break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    /* the remainder keeps its trailing whitespace, as in Python */
                    size_t e = n;
                    if (tpl_list_push(&r->a, l, v_str(s + i, e - i)))
                        return oom(r);
                    break;
                }
                size_t st = i;
                while (i < n && !tpl_u8_space_at(s + i, n - i))
                    i += ((unsigned char)s[i] < 0x80) ? 1 : (tpl_u8_decode(s + i, n - i, &k), k);
                if (tpl_list_push(&r->a, l, v_str(s + st, i - st)))
                    return oom(r);
                splits++;
            }
        } else {
            vlist *rev = tpl_list_new(&r->a, 4);
            size_t e = n, k;
            int64_t splits = 0;
            if (!rev)
                return oom(r);
            for (;;) {
                while (e > 0 && (k = tpl_u8_space_before(s, e)) != 0)
                    e -= k;
                if (e == 0)
                    break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    size_t st = 0;
                    if (tpl_list_push(&r->a, rev, v_str(s + st, e - st)))
                        return oom(r);
                    break;
                }
                size_t en = e;
                while (e > 0 && !tpl_u8_space_before(s, e)) {
                    e--;
                    while (e > 0 && ((unsigned char)s[e] & 0xC0) == 0x80)
                        e--;
                }
                if (tpl_list_push(&r->a, rev, v_str(s + e, en - e)))
                    return oom(r);
                splits++;
            }
            for (size_t i = rev->n; i-- > 0;)
                if (tpl_list_push(&r->a, l, rev->v[i]))
                    return oom(r);
        }
        *out = mk_list(l, false);
        return 0;
    }
    if (!from_right) {
        size_t i = 0;
        int64_t splits = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || splits < maxsplit) ? memmem(s + i, n - i, sep, sn) : NULL;
            if (!hit) {
                if (tpl_list_push(&r->a, l, v_str(s + i, n - i)))
                    return oom(r);
                break;
            }
            if (tpl_list_push(&r->a, l, v_str(s + i, (size_t)(hit - (s + i)))))
                return oom(r);
            i = (size_t)(hit - s) + sn;
            splits++;
        }
    } else {
        vlist *rev = tpl_list_new(&r->a, 4);
        size_t e = n;
        int64_t splits = 0;
        if (!rev)
            return oom(r);
        for (;;) {
            const char *hit = NULL;
            if ((maxsplit < 0 || splits < maxsplit) && e >= sn)
                for (size_t j = e - sn + 1; j-- > 0;)
                    if (memcmp(s + j, sep, sn) == 0) {
                        hit = s + j;
                        break;
                    }
            if (!hit) {
                if (tpl_list_push(&r->a, rev, v_str(s, e)))
                    return oom(r);
                break;
            }
            size_t hs = (size_t)(hit - s);
            if (tpl_list_push(&r->a, rev, v_str(hit + sn, e - hs - sn)))
                return oom(r);
            e = hs;
            splits++;
        }
        for (size_t i = rev->n; i-- > 0;)
            if (tpl_list_push(&r->a, l, rev->v[i]))
                return oom(r);
    }
    *out = mk_list(l, false);
    return 0;
}

/* str.splitlines(): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029 */
static size_t line_break_at(const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    if (c == '\r')
        return (n > 1 && s[1] == '\n') ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e))
        return 1;
    if (c >= 0x80) {
        size_t adv;
        uint32_t cp = tpl_u8_decode(s, n, &adv);
        if (cp == 0x85 || cp == 0x2028 || cp == 0x2029)
            return adv;
    }
    return 0;
}

static int splitlines(render *r, const char *s, size_t n, vlist **out)
{
    vlist *l = tpl_list_new(&r->a, 4);
    if (!l)
        return oom(r);
    size_t st = 0, i = 0;
    while (i < n) {
        size_t k = line_break_at(s + i, n - i);
        if (k) {
            if (tpl_list_push(&r->a, l, v_str(s + st, i - st)))
                return oom(r);
            i += k;
            st = i;
        } else {
            i++;
        }
    }
    if (st < n && tpl_list_push(&r->a, l, v_str(s + st, n - st)))
        return oom(r);
    *out = l;
    return 0;
}

static int do_replace(render *r, const char *s, size_t n, const char *old, size_t on, const char *nw, size_t nn,
                      int64_t count, val *out)
{
    sbuf b;
    tpl_sb_init(&b, &r->a, n + 16);
    if (on == 0) {
        /* Python inserts `new` between every code point (and at both ends) */
        int64_t done = 0;
        size_t i = 0;
        while (i <= n) {
            if (count < 0 || done < count) {
                tpl_sb_put(&b, nw, nn);
                done++;
            }
            if (i == n)
                break;
            size_t adv;
            tpl_u8_decode(s + i, n - i, &adv);
            tpl_sb_put(&b, s + i, adv);
            i += adv;
        }
        return str_new(r, &b, out);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i < n) {
        const char *hit = (count < 0 || done < count) ? memmem(s + i, n - i, old, on) : NULL;
        if (!hit) {
            tpl_sb_put(&b, s + i, n - i);
            break;
        }
        tpl_sb_put(&b, s + i, (size_t)(hit - (s + i)));
        tpl_sb_put(&b, nw, nn);
        i = (size_t)(hit - s) + on;
        done++;
    }
    return str_new(r, &b, out);
}

/* attribute="a.b.0" lookup used by map, sort, selectattr, sum, unique... */
static int get_path(render *r, val v, val path, val *out)
{
    if (path.t == V_INT) {
        return tpl_val_getitem(r, v, path, out);
    }
    if (path.t != V_STR) {
        *out = v_undef();
        return 0;
    }
    const char *p = path.u.s.p, *end = p + path.u.s.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot)
            dot = end;
        size_t n = (size_t)(dot - p);
        bool digits = n > 0;
        int64_t idx = 0;
        for (size_t i = 0; i < n; i++) {
            if (p[i] < '0' || p[i] > '9')
                digits = false;
            else
                idx = idx * 10 + (p[i] - '0');
        }
        /* jinja2's environment.getitem: item first, then attribute */
        if (v.t == V_UNDEF)
            return tpl_val_getattr(r, v, p, n, out); /* raises */
        if (digits && v.t == V_LIST) {
            if (tpl_val_getitem(r, v, v_int(idx), &v))
                return -1;
        } else if (tpl_val_getitem(r, v, v_str(p, n), &v)) {
            return -1;
        }
        p = dot + 1;
        if (dot == end)
            break;
    }
    *out = v;
    return 0;
}

/* Sort keys: case-folded strings unless case_sensitive. */
static val sort_key(render *r, val v, bool case_sensitive)
{
    if (case_sensitive || v.t != V_STR)
        return v;
    val out;
    if (change_case(r, v.u.s.p, v.u.s.n, TPL_CASE_LOWER, &out))
        return v;
    return out;
}

typedef struct sort_item { val key; val v; } sort_item;

/* Stable merge sort; the comparison may raise (mixed types). */
static int merge_sort(render *r, sort_item *a, sort_item *tmp, size_t n, bool reverse)
{
    if (n < 2)
        return 0;
    size_t m = n / 2;
    if (merge_sort(r, a, tmp, m, reverse) || merge_sort(r, a + m, tmp, n - m, reverse))
        return -1;
    size_t i = 0, j = m, k = 0;
    while (i < m && j < n) {
        int c;
        if (tpl_val_cmp(r, a[j].key, a[i].key, &c))
            return -1;
        if (reverse)
            c = -c;
        /* take from the right only when strictly smaller: keeps equal items in order */
        if (c < 0)
            tmp[k++] = a[j++];
        else
            tmp[k++] = a[i++];
    }
    while (i < m)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof(*a));
    return 0;
}

static int sort_items(render *r, sort_item *items, size_t n, bool reverse)
{
    sort_item *tmp = tpl_arena_alloc(&r->a, (n ? n : 1) * sizeof(*tmp));
    if (!tmp)
        return oom(r);
    return merge_sort(r, items, tmp, n, reverse);
}

static int apply_test_by_name(render *r, val name, val v, cargs *rest, bool *out)
{
    if (name.t != V_STR)
        return tpl_rerr(r, "TypeError: test name must be a string");
    int id = tpl_test_lookup(name.u.s.p, name.u.s.n);
    if (!id)
        return tpl_rerr(r, "TemplateRuntimeError: No test named '%.*s'", (int)name.u.s.n, name.u.s.p);
    return tpl_test_apply(r, id, v, rest, out);
}

/* select/reject/selectattr/rejectattr */
static int select_common(render *r, val in, cargs *a, bool by_attr, bool want, val *out)
{
    vlist *items, *res;
    /* jinja2 guards with `if value:`: a falsy non-iterable gives nothing */
    if (!tpl_truthy(in)) {
        res = tpl_list_new(&r->a, 0);
        if (!res)
            return oom(r);
        *out = mk_list(res, false);
        return 0;
    }
    if (tpl_val_iter(r, in, &items))
        return -1;
    res = tpl_list_new(&r->a, items->n);
    if (!res)
        return oom(r);
    int first_test_arg = by_attr ? 1 : 0;
    cargs rest = *a;
    val testname = v_undef();
    bool has_test = a->npos > first_test_arg;
    if (has_test) {
        testname = a->pos[first_test_arg];
        rest.pos = a->pos + first_test_arg + 1;
        rest.npos = a->npos - first_test_arg - 1;
    }
    for (size_t i = 0; i < items->n; i++) {
        val v = items->v[i];
        if (by_attr) {
            if (a->npos < 1)
                return tpl_rerr(r, "TypeError: selectattr/rejectattr need an attribute name");
            if (get_path(r, v, a->pos[0], &v))
                return -1;
        }
        bool ok;
        if (has_test) {
            if (apply_test_by_name(r, testname, v, &rest, &ok))
                return -1;
        } else {
            ok = tpl_truthy(v);
        }
        if (ok == want)
            res->v[res->n++] = items->v[i];
    }
    *out = mk_list(res, false);
    return 0;
}

static int unique_list(render *r, vlist *items, bool cs, val attr, bool has_attr, vlist **out)
{
    /* a set of keys, as jinja2 keeps: hashed, so long lists stay linear */
    vlist *res = tpl_list_new(&r->a, items->n);
    vdict *seen = tpl_dict_new(&r->a, 0);
    if (!res || !seen)
        return oom(r);
    for (size_t i = 0; i < items->n; i++) {
        val k = items->v[i];
        if (has_attr && get_path(r, k, attr, &k))
            return -1;
        k = sort_key(r, k, cs);
        if (!tpl_hashable(k))
            return tpl_rerr(r, "TypeError: unhashable type: '%s'", tpl_py_type_name(k));
        if (tpl_dict_get_val(seen, k))
            continue;
        if (tpl_dict_set(&r->a, seen, k, v_none()))
            return oom(r);
        res->v[res->n++] = items->v[i];
    }
    *out = res;
    return 0;
}

/* Python's printf-style formatting: "%s and %d" % (a, b) */

/* The digits of a %-format width or precision at s[*i], saturated past any allowed value (a
 * template may write a number of any length; the caller rejects anything over its limit). */
static int fmt_number(const char *s, size_t n, size_t *i)
{
    int v = 0;
    for (; *i < n && s[*i] >= '0' && s[*i] <= '9'; (*i)++)
        v = v > 100000 ? v : v * 10 + (s[*i] - '0');
    return v;
}
static int percent_format(render *r, const char *s, size_t n, cargs *a, val *out)
{
    sbuf b;
    tpl_sb_init(&b, &r->a, n + 32);
    int argi = 0;
    vdict *kwmap = NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            tpl_sb_putc(&b, s[i]);
            continue;
        }
        if (++i >= n)
            return tpl_rerr(r, "ValueError: incomplete format");
        val arg;
        bool have_key = false;
        if (s[i] == '(') {
            size_t st = ++i;
            while (i < n && s[i] != ')')
                i++;
            if (i >= n)
                return tpl_rerr(r, "ValueError: incomplete format key");
            if (!kwmap) {
                if (a->npos == 1 && a->pos[0].t == V_DICT)
                    kwmap = a->pos[0].u.d;
                else
                    return tpl_rerr(r, "TypeError: format requires a mapping");
            }
            val *v = tpl_dict_get(kwmap, s + st, i - st);
            if (!v)
                return tpl_rerr(r, "KeyError: '%.*s'", (int)(i - st), s + st);
            arg = *v;
            have_key = true;
            i++;
        }
        char spec[32];
        size_t k = 0;
        spec[k++] = '%';
        while (i < n && strchr("-+ #0", s[i]) && k < 8)
            spec[k++] = s[i++];
        int width = fmt_number(s, n, &i), prec = -1;
        bool left = memchr(spec, '-', k) != NULL, zero = memchr(spec, '0', k) != NULL;
        if (i < n && s[i] == '.') {
            i++;
            prec = fmt_number(s, n, &i);
        }
        if (width > 10000 || prec > 1000)
            return tpl_rerr(r, "ValueError: format width too large");
        if (i >= n)
            return tpl_rerr(r, "ValueError: incomplete format");
        char conv = s[i];
        if (conv == '%') {
            tpl_sb_putc(&b, '%');
            continue;
        }
        if (!have_key) {
            if (argi >= a->npos)
                return tpl_rerr(r, "TypeError: not enough arguments for format string");
            arg = a->pos[argi++];
        }
        switch (conv) {
        case 's': case 'r': case 'a': {
            sbuf t;
            tpl_sb_init(&t, &r->a, 32);
            if (conv == 's')
                tpl_py_str(&t, arg);
            else
                tpl_py_repr(&t, arg);
            size_t len = t.n;
            if (prec >= 0) {
                size_t off = tpl_u8_offset(t.p, t.n, (size_t)prec);
                len = off;
            }
            size_t cps = tpl_u8_len(t.p, len);
            if (!left)
                for (size_t p = cps; p < (size_t)width; p++)
                    tpl_sb_putc(&b, ' ');
            tpl_sb_put(&b, t.p, len);
            if (left)
                for (size_t p = cps; p < (size_t)width; p++)
                    tpl_sb_putc(&b, ' ');
            break;
        }
        case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': case 'c': {
            int64_t iv;
            if (arg.t == V_INT || arg.t == V_BOOL)
                iv = arg.u.i;
            else if (arg.t == V_FLOAT && conv != 'x' && conv != 'X' && conv != 'o' && conv != 'c')
                iv = (int64_t)arg.u.f;
            else
                return tpl_rerr(r, "TypeError: %%%c format: a real number is required, not %s", conv, tpl_py_type_name(arg));
            if (conv == 'c') {
                put_cp(&b, (uint32_t)iv);
                break;
            }
            char fmt[48];
            char c2 = (conv == 'i' || conv == 'u') ? 'd' : conv;
            (void)zero;
            if (prec < 0) {
                snprintf(fmt, sizeof(fmt), "%.*s*ll%c", (int)k, spec, c2);
                tpl_sb_printf(&b, fmt, width, (long long)iv);
            } else {
                snprintf(fmt, sizeof(fmt), "%.*s*.*ll%c", (int)k, spec, c2);
                tpl_sb_printf(&b, fmt, width, prec, (long long)iv);
            }
            break;
        }
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
            double fv;
            if (arg.t == V_INT || arg.t == V_BOOL || arg.t == V_FLOAT)
                fv = arg.t == V_FLOAT ? arg.u.f : (double)arg.u.i;
            else
                return tpl_rerr(r, "TypeError: must be real number, not %s", tpl_py_type_name(arg));
            char fmt[48];
            snprintf(fmt, sizeof(fmt), "%.*s*.*%c", (int)k, spec, conv);
            tpl_sb_printf(&b, fmt, width, prec < 0 ? 6 : prec, fv);
            break;
        }
        default:
            return tpl_rerr(r, "ValueError: unsupported format character '%c'", conv);
        }
    }
    if (argi < a->npos && !kwmap)
        return tpl_rerr(r, "TypeError: not all arguments converted during string formatting");
    return str_new(r, &b, out);
}

static int to_int(render *r, val v, int64_t dflt, int64_t base, val *out)
{
    (void)r;
    switch (v.t) {
    case V_BIGINT: *out = v; return 0;
    case V_INT: case V_BOOL: *out = v_int(v.u.i); return 0;
    case V_FLOAT:
        if (isnan(v.u.f) || isinf(v.u.f))
            return tpl_rerr(r, "ValueError: cannot convert float NaN or infinity to integer");
        *out = v_int((int64_t)v.u.f);
        return 0;
    case V_STR: {
        char buf[80];
        const char *s = v.u.s.p;
        size_t n = v.u.s.n;
        while (n && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v')) {
            s++;
            n--;
        }
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
            n--;
        size_t k = 0;
        for (size_t i = 0; i < n && k < sizeof(buf) - 1; i++) {
            if (s[i] == '_' && i > 0 && i + 1 < n && s[i - 1] != '_')
                continue;
            buf[k++] = s[i];
        }
        buf[k] = '\0';
        if (k > 0 && k < sizeof(buf) - 1) {
            char *end;
            long long iv = strtoll(buf, &end, (int)base);
            if (*end == '\0' && end != buf && !(buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X') && base != 16)) {
                *out = v_int(iv);
                return 0;
            }
            double d = strtod(buf, &end);
            if (*end == '\0' && end != buf && !isnan(d) && !isinf(d) && strpbrk(buf, "xXpP") == NULL) {
                *out = v_int((int64_t)d);
                return 0;
            }
        }
        *out = v_int(dflt);
        return 0;
    }
    default:
        *out = v_int(dflt);
        return 0;
    }
}

static int to_float(val v, double dflt, val *out)
{
    switch (v.t) {
    case V_BIGINT: *out = v_float(strtod(v.u.s.p, NULL)); return 0;
    case V_INT: case V_BOOL: *out = v_float((double)v.u.i); return 0;
    case V_FLOAT: *out = v; return 0;
    case V_STR: {
        char buf[80];
        size_t n = v.u.s.n < sizeof(buf) - 1 ? v.u.s.n : sizeof(buf) - 1;
        memcpy(buf, v.u.s.p, n);
        buf[n] = '\0';
        char *end;
        double d = strtod(buf, &end);
        while (*end == ' ' || *end == '\n' || *end == '\t')
            end++;
        if (end != buf && *end == '\0' && strpbrk(buf, "xXpP") == NULL) {
            *out = v_float(d);
            return 0;
        }
        *out = v_float(dflt);
        return 0;
    }
    default:
        *out = v_float(dflt);
        return 0;
    }
}

static double py_round(double x, int64_t nd)
{
    if (isnan(x) || isinf(x))
        return x;
    if (nd > 300 || nd < -300)
        return nd > 0 ? x : 0.0 * x;
    char buf[400];
    if (nd >= 0) {
        snprintf(buf, sizeof(buf), "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-nd);
    return nearbyint(x / p) * p;
}

static int json_filter(render *r, val in, cargs *a, val *out)
{
    bool ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
    val ind;
    char spaces[64];
    const char *indent = NULL;
    size_t indent_len = 0;
    bool use_indent = false;
    if (tpl_get_arg(a, 1, "indent", &ind) && ind.t != V_NONE) {
        use_indent = true;
        if (ind.t == V_INT || ind.t == V_BOOL) {
            int64_t k = ind.u.i < 0 ? 0 : ind.u.i > 63 ? 63 : ind.u.i;
            memset(spaces, ' ', (size_t)k);
            indent = spaces;
            indent_len = (size_t)k;
        } else if (ind.t == V_STR) {
            indent = ind.u.s.p;
            indent_len = ind.u.s.n;
        } else {
            return tpl_rerr(r, "TypeError: tojson indent must be an int or a string");
        }
    }
    const char *item_sep = use_indent ? "," : ", ", *key_sep = ": ";
    val sep;
    if (tpl_get_arg(a, 2, "separators", &sep) && sep.t != V_NONE) {
        if (sep.t != V_LIST || sep.u.l->n != 2 || sep.u.l->v[0].t != V_STR || sep.u.l->v[1].t != V_STR)
            return tpl_rerr(r, "TypeError: tojson separators must be a pair of strings");
        item_sep = tpl_arena_memdup(&r->a, sep.u.l->v[0].u.s.p, sep.u.l->v[0].u.s.n);
        key_sep = tpl_arena_memdup(&r->a, sep.u.l->v[1].u.s.p, sep.u.l->v[1].u.s.n);
        if (!item_sep || !key_sep)
            return oom(r);
    }
    bool sort_keys = arg_bool(a, 3, "sort_keys", false);
    sbuf b;
    tpl_sb_init(&b, &r->a, 256);
    if (tpl_py_json(&b, in, ensure_ascii, indent, indent_len, use_indent, item_sep, key_sep, sort_keys, 0, r->err))
        return -1;
    return str_new(r, &b, out);
}

static int indent_filter(render *r, val in, cargs *a, val *out)
{
    /* jinja2 appends "\n" to the value itself: only strings get through */
    if (in.t == V_UNDEF)
        return tpl_val_getattr(r, in, "splitlines", 10, out);
    if (in.t != V_STR)
        return tpl_rerr(r, "TypeError: indent needs a string, not %s", tpl_py_type_name(in));
    const char *s = in.u.s.p;
    size_t n = in.u.s.n;
    val w;
    char spaces[256];
    const char *ind = spaces;
    size_t ind_len = 4;
    memset(spaces, ' ', 4);
    if (tpl_get_arg(a, 0, "width", &w)) {
        if (w.t == V_STR) {
            ind = w.u.s.p;
            ind_len = w.u.s.n;
        } else if (w.t == V_INT || w.t == V_BOOL) {
            ind_len = w.u.i < 0 ? 0 : w.u.i > 255 ? 255 : (size_t)w.u.i;
            memset(spaces, ' ', ind_len);
        } else {
            return tpl_rerr(r, "TypeError: indent width must be an int or a string");
        }
    }
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    /* s + "\n", then splitlines (as jinja2 does) */
    char *tmp = tpl_arena_alloc(&r->a, n + 2);
    if (!tmp)
        return oom(r);
    memcpy(tmp, s, n);
    tmp[n] = '\n';
    vlist *lines;
    if (splitlines(r, tmp, n + 1, &lines))
        return -1;
    sbuf b;
    tpl_sb_init(&b, &r->a, n + 64);
    if (first)
        tpl_sb_put(&b, ind, ind_len);
    for (size_t i = 0; i < lines->n; i++) {
        val l = lines->v[i];
        if (i > 0) {
            tpl_sb_putc(&b, '\n');
            if (blank || l.u.s.n)
                tpl_sb_put(&b, ind, ind_len);
        }
        tpl_sb_put(&b, l.u.s.p, l.u.s.n);
    }
    return str_new(r, &b, out);
}

static int escape_html(render *r, val in, val *out)
{
    const char *s;
    size_t n;
    if (to_s(r, in, &s, &n))
        return -1;
    sbuf b;
    tpl_sb_init(&b, &r->a, n + 16);
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '&': tpl_sb_puts(&b, "&amp;"); break;
        case '<': tpl_sb_puts(&b, "&lt;"); break;
        case '>': tpl_sb_puts(&b, "&gt;"); break;
        case '"': tpl_sb_puts(&b, "&#34;"); break;
        case '\'': tpl_sb_puts(&b, "&#39;"); break;
        default: tpl_sb_putc(&b, s[i]);
        }
    }
    return str_new(r, &b, out);
}

static int minmax(render *r, val in, cargs *a, bool want_max, val *out)
{
    vlist *items;
    if (tpl_val_iter(r, in, &items))
        return -1;
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    val attr;
    bool has_attr = tpl_get_arg(a, 1, "attribute", &attr) && attr.t != V_NONE;
    if (items->n == 0) {
        *out = v_undef();
        return 0;
    }
    val best = items->v[0], best_key = best;
    if (has_attr && get_path(r, best, attr, &best_key))
        return -1;
    best_key = sort_key(r, best_key, cs);
    for (size_t i = 1; i < items->n; i++) {
        val k = items->v[i];
        if (has_attr && get_path(r, k, attr, &k))
            return -1;
        k = sort_key(r, k, cs);
        int c;
        if (tpl_val_cmp(r, k, best_key, &c))
            return -1;
        if (want_max ? c > 0 : c < 0) {
            best = items->v[i];
            best_key = k;
        }
    }
    *out = best;
    return 0;
}

/* ------------------------------------------------------------------------------------------- filters */

int tpl_filter_apply(render *r, int id, val in, cargs *a, val *out)
{
    const char *s;
    size_t n;
    vlist *items;
    int64_t k;
    switch (id) {
    case F_ABS:
        if (in.t == V_BIGINT) {
            *out = in;
            if (in.u.s.n && in.u.s.p[0] == '-') {
                out->u.s.p++;
                out->u.s.n--;
            }
        } else if (in.t == V_INT && in.u.i == INT64_MIN)
            return tpl_make_int(r, -(__int128)in.u.i, out);
        else if (in.t == V_INT || in.t == V_BOOL)
            *out = v_int(in.u.i < 0 ? -in.u.i : in.u.i);
        else if (in.t == V_FLOAT)
            *out = v_float(fabs(in.u.f));
        else if (in.t == V_UNDEF)
            return tpl_val_getattr(r, in, "abs", 3, out);
        else
            return tpl_rerr(r, "TypeError: bad operand type for abs(): '%s'", tpl_py_type_name(in));
        return 0;
    case F_ATTR: {
        val name;
        if (!tpl_get_arg(a, 0, "name", &name) || name.t != V_STR)
            return tpl_rerr(r, "TypeError: attr filter needs a name");
        return tpl_val_getattr(r, in, name.u.s.p, name.u.s.n, out);
    }
    case F_BATCH:
    case F_SLICE: {
        int64_t count;
        if (arg_int(r, a, 0, id == F_BATCH ? "linecount" : "slices", 1, &count))
            return -1;
        if (count <= 0)
            return tpl_rerr(r, "ValueError: %s count must be positive", id == F_BATCH ? "batch" : "slice");
        val fill;
        bool has_fill = tpl_get_arg(a, 1, "fill_with", &fill) && fill.t != V_NONE;
        if (tpl_val_iter(r, in, &items))
            return -1;
        vlist *res = tpl_list_new(&r->a, 4);
        if (!res)
            return oom(r);
        if (id == F_BATCH) {
            for (size_t i = 0; i < items->n; i += (size_t)count) {
                vlist *row = tpl_list_new(&r->a, (size_t)count);
                if (!row)
                    return oom(r);
                for (size_t j = i; j < i + (size_t)count; j++) {
                    if (j < items->n)
                        row->v[row->n++] = items->v[j];
                    else if (has_fill)
                        row->v[row->n++] = fill;
                }
                if (tpl_list_push(&r->a, res, mk_list(row, false)))
                    return oom(r);
            }
        } else {
            size_t len = items->n, per = len / (size_t)count, extra = len % (size_t)count, off = 0;
            for (size_t i = 0; i < (size_t)count; i++) {
                size_t start = off + (i < extra ? i : extra);
                size_t end = start + per + (i < extra ? 1 : 0);
                off += per;
                vlist *row = tpl_list_new(&r->a, end - start + 1);
                if (!row)
                    return oom(r);
                for (size_t j = start; j < end; j++)
                    row->v[row->n++] = items->v[j];
                if (has_fill && i >= extra && extra)
                    row->v[row->n++] = fill;
                if (tpl_list_push(&r->a, res, mk_list(row, false)))
                    return oom(r);
            }
        }
        *out = mk_list(res, false);
        return 0;
    }
    case F_CAPITALIZE:
        return to_s(r, in, &s, &n) ? -1 : change_case(r, s, n, TPL_CASE_CAPITALIZE, out);
    case F_CENTER: {
        if (to_s(r, in, &s, &n) || arg_int(r, a, 0, "width", 80, &k))
            return -1;
        size_t len = tpl_u8_len(s, n);
        if (k > 100000)
            return tpl_rerr(r, "ValueError: center width too large");
        if ((int64_t)len >= k) {
            *out = v_str(s, n);
            return 0;
        }
        int64_t marg = k - (int64_t)len, left = marg / 2 + (marg & k & 1);
        sbuf b;
        tpl_sb_init(&b, &r->a, n + (size_t)marg + 1);
        for (int64_t i = 0; i < left; i++)
            tpl_sb_putc(&b, ' ');
        tpl_sb_put(&b, s, n);
        for (int64_t i = 0; i < marg - left; i++)
            tpl_sb_putc(&b, ' ');
        return str_new(r, &b, out);
    }
    case F_COUNT:
    case F_LENGTH: {
        int64_t len;
        if (tpl_val_len(r, in, &len))
            return -1;
        *out = v_int(len);
        return 0;
    }
    case F_DEFAULT: {
        val d = v_str("", 0);
        tpl_get_arg(a, 0, "default_value", &d);
        bool boolean = arg_bool(a, 1, "boolean", false);
        *out = (in.t == V_UNDEF || (boolean && !tpl_truthy(in))) ? d : in;
        return 0;
    }
    case F_DICTSORT: {
        if (in.t != V_DICT)
            return tpl_rerr(r, "TypeError: dictsort needs a mapping, not %s", tpl_py_type_name(in));
        bool cs = arg_bool(a, 0, "case_sensitive", false);
        val by = v_str("key", 3);
        tpl_get_arg(a, 1, "by", &by);
        bool reverse = arg_bool(a, 2, "reverse", false);
        bool by_value = by.t == V_STR && by.u.s.n == 5 && memcmp(by.u.s.p, "value", 5) == 0;
        if (!by_value && !(by.t == V_STR && by.u.s.n == 3 && memcmp(by.u.s.p, "key", 3) == 0))
            return tpl_rerr(r, "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
        size_t cnt = in.u.d->n;
        sort_item *it = tpl_arena_alloc(&r->a, (cnt ? cnt : 1) * sizeof(*it));
        if (!it)
            return oom(r);
        for (size_t i = 0; i < cnt; i++) {
            vlist *pair = tpl_list_new(&r->a, 2);
            if (!pair)
                return oom(r);
            pair->v[0] = in.u.d->k[i];
            pair->v[1] = in.u.d->v[i];
            pair->n = 2;
            it[i].v = mk_list(pair, true);
            it[i].key = sort_key(r, by_value ? in.u.d->v[i] : in.u.d->k[i], cs);
        }
        if (sort_items(r, it, cnt, reverse))
            return -1;
        vlist *res = tpl_list_new(&r->a, cnt);
        if (!res)
            return oom(r);
        for (size_t i = 0; i < cnt; i++)
            res->v[res->n++] = it[i].v;
        *out = mk_list(res, false);
        return 0;
    }
    case F_ESCAPE:
        return escape_html(r, in, out);
    case F_FIRST:
    case F_LAST:
        if (tpl_val_iter(r, in, &items))
            return -1;
        *out = items->n ? items->v[id == F_FIRST ? 0 : items->n - 1] : v_undef();
        return 0;
    case F_FLOAT: {
        if (in.t == V_UNDEF) /* float(Undefined) raises */
            return tpl_val_getattr(r, in, "float", 5, out);
        val d;
        double dflt = 0.0;
        if (tpl_get_arg(a, 0, "default", &d) && (d.t == V_FLOAT || d.t == V_INT))
            dflt = d.t == V_FLOAT ? d.u.f : (double)d.u.i;
        return to_float(in, dflt, out);
    }
    case F_FORMAT:
        if (to_s(r, in, &s, &n))
            return -1;
        if (a->nkw) {
            if (a->npos)
                return tpl_rerr(r, "FilterArgumentError: can't handle positional and keyword arguments at the same time");
            vdict *d = tpl_dict_new(&r->a, (size_t)a->nkw);
            if (!d)
                return oom(r);
            for (int i = 0; i < a->nkw; i++)
                if (tpl_dict_set(&r->a, d, v_str(a->kw[i], a->kwlen[i]), a->kwv[i]))
                    return oom(r);
            val dv = {.t = V_DICT, .u.d = d};
            cargs one = {.pos = &dv, .npos = 1};
            return percent_format(r, s, n, &one, out);
        }
        return percent_format(r, s, n, a, out);
    case F_INDENT:
        return indent_filter(r, in, a, out);
    case F_INT: {
        if (in.t == V_UNDEF) /* int(Undefined) raises */
            return tpl_val_getattr(r, in, "int", 3, out);
        int64_t dflt, base;
        if (arg_int(r, a, 0, "default", 0, &dflt) || arg_int(r, a, 1, "base", 10, &base))
            return -1;
        if (base != 0 && (base < 2 || base > 36))
            return tpl_rerr(r, "ValueError: int() base must be >= 2 and <= 36, or 0");
        return to_int(r, in, dflt, base, out);
    }
    case F_ITEMS: {
        if (in.t == V_UNDEF) {
            vlist *l = tpl_list_new(&r->a, 0);
            if (!l)
                return oom(r);
            *out = mk_list(l, false);
            return 0;
        }
        if (in.t != V_DICT)
            return tpl_rerr(r, "TypeError: Can only get item pairs from a mapping.");
        bool found;
        return tpl_method_apply(r, M_ITEMS, in, a, out, &found);
    }
    case F_JOIN: {
        val sep = v_str("", 0), attr;
        tpl_get_arg(a, 0, "d", &sep);
        bool has_attr = tpl_get_arg(a, 1, "attribute", &attr) && attr.t != V_NONE;
        if (tpl_val_iter(r, in, &items))
            return -1;
        const char *sp;
        size_t sn;
        if (to_s(r, sep, &sp, &sn))
            return -1;
        sbuf b;
        tpl_sb_init(&b, &r->a, 128);
        for (size_t i = 0; i < items->n; i++) {
            val v = items->v[i];
            if (has_attr && get_path(r, v, attr, &v))
                return -1;
            if (i)
                tpl_sb_put(&b, sp, sn);
            tpl_py_str(&b, v);
        }
        return str_new(r, &b, out);
    }
    case F_LIST: {
        if (tpl_val_iter(r, in, &items))
            return -1;
        vlist *l = tpl_list_new(&r->a, items->n);
        if (!l)
            return oom(r);
        if (items->n)
            memcpy(l->v, items->v, items->n * sizeof(val));
        l->n = items->n;
        *out = mk_list(l, false);
        return 0;
    }
    case F_LOWER:
        return to_s(r, in, &s, &n) ? -1 : change_case(r, s, n, TPL_CASE_LOWER, out);
    case F_UPPER:
        return to_s(r, in, &s, &n) ? -1 : change_case(r, s, n, TPL_CASE_UPPER, out);
    case F_TITLE:
        return to_s(r, in, &s, &n) ? -1 : change_case(r, s, n, TPL_CASE_JINJA_TITLE, out);
    case F_MAP: {
        if (!tpl_truthy(in))
            in = v_undef(); /* `if value:` in jinja2's do_map: nothing to map */
        if (tpl_val_iter(r, in, &items))
            return -1;
        vlist *res = tpl_list_new(&r->a, items->n);
        if (!res)
            return oom(r);
        val attr;
        if (tpl_get_arg(a, -1, "attribute", &attr)) {
            val dflt;
            bool has_dflt = tpl_get_arg(a, -1, "default", &dflt);
            for (size_t i = 0; i < items->n; i++) {
                val v;
                if (get_path(r, items->v[i], attr, &v))
                    return -1;
                if (v.t == V_UNDEF && has_dflt)
                    v = dflt;
                res->v[res->n++] = v;
            }
        } else {
            if (a->npos < 1 || a->pos[0].t != V_STR)
                return tpl_rerr(r, "TypeError: map needs a filter name or attribute=");
            int fid = tpl_filter_lookup(a->pos[0].u.s.p, a->pos[0].u.s.n);
            if (!fid)
                return tpl_rerr(r, "TemplateRuntimeError: No filter named '%.*s'", (int)a->pos[0].u.s.n,
                            a->pos[0].u.s.p);
            cargs rest = *a;
            rest.pos = a->pos + 1;
            rest.npos = a->npos - 1;
            for (size_t i = 0; i < items->n; i++)
                if (tpl_filter_apply(r, fid, items->v[i], &rest, &res->v[res->n++]))
                    return -1;
        }
        *out = mk_list(res, false);
        return 0;
    }
    case F_MAX:
    case F_MIN:
        return minmax(r, in, a, id == F_MAX, out);
    case F_SELECT: return select_common(r, in, a, false, true, out);
    case F_REJECT: return select_common(r, in, a, false, false, out);
    case F_SELECTATTR: return select_common(r, in, a, true, true, out);
    case F_REJECTATTR: return select_common(r, in, a, true, false, out);
    case F_REPLACE: {
        val old, nw;
        int64_t count;
        if (!tpl_get_arg(a, 0, "old", &old) || !tpl_get_arg(a, 1, "new", &nw))
            return tpl_rerr(r, "TypeError: replace needs old and new");
        if (arg_int(r, a, 2, "count", -1, &count) || to_s(r, in, &s, &n))
            return -1;
        const char *op, *np;
        size_t on, nn;
        if (to_s(r, old, &op, &on) || to_s(r, nw, &np, &nn))
            return -1;
        return do_replace(r, s, n, op, on, np, nn, count, out);
    }
    case F_REVERSE:
        if (in.t == V_STR) {
            sbuf b;
            tpl_sb_init(&b, &r->a, in.u.s.n + 1);
            size_t e = in.u.s.n;
            while (e > 0) {
                size_t st = e - 1;
                while (st > 0 && ((unsigned char)in.u.s.p[st] & 0xC0) == 0x80)
                    st--;
                tpl_sb_put(&b, in.u.s.p + st, e - st);
                e = st;
            }
            return str_new(r, &b, out);
        }
        if (tpl_val_iter(r, in, &items))
            return -1;
        {
            vlist *l = tpl_list_new(&r->a, items->n);
            if (!l)
                return oom(r);
            for (size_t i = items->n; i-- > 0;)
                l->v[l->n++] = items->v[i];
            *out = mk_list(l, false);
        }
        return 0;
    case F_ROUND: {
        int64_t prec;
        if (arg_int(r, a, 0, "precision", 0, &prec))
            return -1;
        val method = v_str("common", 6);
        tpl_get_arg(a, 1, "method", &method);
        if (in.t == V_BIGINT) {
            *out = in;
            return 0;
        }
        if (!(in.t == V_INT || in.t == V_BOOL || in.t == V_FLOAT))
            return in.t == V_UNDEF ? tpl_val_getattr(r, in, "round", 5, out)
                                   : tpl_rerr(r, "TypeError: type %s doesn't define __round__ method", tpl_py_type_name(in));
        double x = in.t == V_FLOAT ? in.u.f : (double)in.u.i;
        if (method.t == V_STR && method.u.s.n == 6 && memcmp(method.u.s.p, "common", 6) == 0) {
            if (in.t != V_FLOAT) {
                *out = v_int(in.u.i);
                return 0;
            }
            *out = v_float(py_round(x, prec));
            return 0;
        }
        double p = pow(10.0, (double)prec);
        if (method.t == V_STR && method.u.s.n == 5 && memcmp(method.u.s.p, "floor", 5) == 0)
            *out = v_float(floor(x * p) / p);
        else if (method.t == V_STR && method.u.s.n == 4 && memcmp(method.u.s.p, "ceil", 4) == 0)
            *out = v_float(ceil(x * p) / p);
        else
            return tpl_rerr(r, "FilterArgumentError: method must be common, ceil or floor");
        return 0;
    }
    case F_SAFE:
    case F_STRING:
        return tpl_val_to_str(r, in, out);
    case F_SORT: {
        bool reverse = arg_bool(a, 0, "reverse", false), cs = arg_bool(a, 1, "case_sensitive", false);
        val attr;
        bool has_attr = tpl_get_arg(a, 2, "attribute", &attr) && attr.t != V_NONE;
        if (tpl_val_iter(r, in, &items))
            return -1;
        sort_item *it = tpl_arena_alloc(&r->a, (items->n ? items->n : 1) * sizeof(*it));
        if (!it)
            return oom(r);
        /* attribute="a,b" sorts by several attributes (jinja2's make_multi_attrgetter) */
        const char *comma = has_attr && attr.t == V_STR ? memchr(attr.u.s.p, ',', attr.u.s.n) : NULL;
        for (size_t i = 0; i < items->n; i++) {
            it[i].v = items->v[i];
            val key = items->v[i];
            if (comma) {
                vlist *parts = tpl_list_new(&r->a, 2);
                if (!parts)
                    return oom(r);
                const char *q = attr.u.s.p, *end = attr.u.s.p + attr.u.s.n;
                while (q <= end) {
                    const char *c = memchr(q, ',', (size_t)(end - q));
                    if (!c)
                        c = end;
                    val part;
                    if (get_path(r, items->v[i], v_str(q, (size_t)(c - q)), &part) ||
                        tpl_list_push(&r->a, parts, sort_key(r, part, cs)))
                        return -1;
                    q = c + 1;
                }
                key = mk_list(parts, false);
            } else {
                if (has_attr && get_path(r, key, attr, &key))
                    return -1;
                key = sort_key(r, key, cs);
            }
            it[i].key = key;
        }
        if (sort_items(r, it, items->n, reverse))
            return -1;
        vlist *res = tpl_list_new(&r->a, items->n);
        if (!res)
            return oom(r);
        for (size_t i = 0; i < items->n; i++)
            res->v[res->n++] = it[i].v;
        *out = mk_list(res, false);
        return 0;
    }
    case F_SUM: {
        val attr, acc = v_int(0);
        bool has_attr = tpl_get_arg(a, 0, "attribute", &attr) && attr.t != V_NONE;
        tpl_get_arg(a, 1, "start", &acc);
        if (tpl_val_iter(r, in, &items))
            return -1;
        for (size_t i = 0; i < items->n; i++) {
            val v = items->v[i];
            if (has_attr && get_path(r, v, attr, &v))
                return -1;
            if (tpl_binop(r, OP_ADD, acc, v, &acc))
                return -1;
        }
        *out = acc;
        return 0;
    }
    case F_TOJSON:
        return json_filter(r, in, a, out);
    case F_TRIM: {
        const char *cp = NULL;
        size_t cn = 0;
        bool has;
        if (to_s(r, in, &s, &n) || arg_str(r, a, 0, "chars", &cp, &cn, &has))
            return -1;
        *out = do_strip(s, n, has ? cp : NULL, cn, true, true);
        return 0;
    }
    case F_UNIQUE: {
        bool cs = arg_bool(a, 0, "case_sensitive", false);
        val attr;
        bool has_attr = tpl_get_arg(a, 1, "attribute", &attr) && attr.t != V_NONE;
        vlist *res = NULL;
        if (tpl_val_iter(r, in, &items) || unique_list(r, items, cs, attr, has_attr, &res))
            return -1;
        *out = mk_list(res, false);
        return 0;
    }
    case F_WORDCOUNT: {
        if (to_s(r, in, &s, &n))
            return -1;
        int64_t words = 0;
        bool in_word = false;
        size_t i = 0;
        while (i < n) {
            size_t adv;
            uint32_t c = tpl_u8_decode(s + i, n - i, &adv);
            bool w = c == '_' || tpl_cp_alnum(c); /* re's \w, as jinja2's _word_re = r"\w+" */
            if (w && !in_word)
                words++;
            in_word = w;
            i += adv;
        }
        *out = v_int(words);
        return 0;
    }
    }
    return tpl_rerr(r, "internal error: unknown filter %d", id);
}

/* --------------------------------------------------------------------------------------------- tests */

static bool str_all(val v, int kind)
{
    /* kind 0: islower, 1: isupper */
    return tpl_case_is(v.u.s.p, v.u.s.n, kind == 1);
}

int tpl_test_apply(render *r, int id, val v, cargs *a, bool *out)
{
    val arg = v_undef();
    bool has = tpl_get_arg(a, 0, "value", &arg) || tpl_get_arg(a, 0, "other", &arg) || tpl_get_arg(a, 0, "num", &arg) ||
               tpl_get_arg(a, 0, "seq", &arg);
    int c;
    switch (id) {
    case T_BOOLEAN: *out = v.t == V_BOOL; return 0;
    case T_CALLABLE: *out = v.t == V_MACRO || v.t == V_FUNC; return 0;
    case T_DEFINED: *out = v.t != V_UNDEF; return 0;
    case T_UNDEFINED: *out = v.t == V_UNDEF; return 0;
    case T_NONE: *out = v.t == V_NONE; return 0;
    case T_TRUE: *out = v.t == V_BOOL && v.u.i; return 0;
    case T_FALSE: *out = v.t == V_BOOL && !v.u.i; return 0;
    case T_STRING: *out = v.t == V_STR; return 0;
    case T_NUMBER: *out = v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL || v.t == V_BIGINT; return 0;
    case T_INTEGER: *out = v.t == V_INT || v.t == V_BIGINT; return 0;
    case T_FLOAT: *out = v.t == V_FLOAT; return 0;
    case T_MAPPING: *out = v.t == V_DICT; return 0;
    case T_ITERABLE: *out = v.t == V_STR || v.t == V_LIST || v.t == V_DICT || v.t == V_UNDEF || v.t == V_LOOP; return 0;
    case T_SEQUENCE: *out = v.t == V_STR || v.t == V_LIST || v.t == V_DICT || v.t == V_UNDEF; return 0;
    case T_ESCAPED: *out = false; return 0;
    case T_LOWER:
    case T_UPPER: {
        val s;
        if (tpl_val_to_str(r, v, &s))
            return -1;
        *out = str_all(s, id == T_LOWER ? 0 : 1);
        return 0;
    }
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: {
        val m;
        val div = id == T_DIVISIBLEBY ? arg : v_int(2);
        if (id == T_DIVISIBLEBY && !has)
            return tpl_rerr(r, "TypeError: divisibleby needs a number");
        if (tpl_binop(r, OP_MOD, v, div, &m))
            return -1;
        bool zero = m.t == V_FLOAT ? m.u.f == 0.0 : m.u.i == 0;
        *out = id == T_ODD ? !zero : zero;
        return 0;
    }
    case T_EQ: *out = tpl_val_eq(v, arg); return 0;
    case T_NE: *out = !tpl_val_eq(v, arg); return 0;
    case T_SAMEAS:
        *out = v.t == arg.t && (v.t == V_NONE || v.t == V_UNDEF || v.t == V_BOOL ? tpl_val_eq(v, arg)
                                : v.t == V_INT ? v.u.i == arg.u.i && v.u.i >= -5 && v.u.i <= 256
                                : v.t == V_LIST ? v.u.l == arg.u.l
                                : v.t == V_DICT || v.t == V_NS ? v.u.d == arg.u.d
                                : v.t == V_STR ? v.u.s.p == arg.u.s.p && v.u.s.n == arg.u.s.n
                                : tpl_val_eq(v, arg));
        return 0;
    case T_LT: case T_LE: case T_GT: case T_GE:
        if (tpl_val_cmp(r, v, arg, &c))
            return -1;
        *out = id == T_LT ? c < 0 : id == T_LE ? c <= 0 : id == T_GT ? c > 0 : c >= 0;
        return 0;
    case T_IN: {
        bool found = false;
        if (arg.t == V_STR) {
            if (v.t != V_STR)
                return tpl_rerr(r, "TypeError: 'in <string>' requires string as left operand, not %s", tpl_py_type_name(v));
            found = v.u.s.n == 0 || memmem(arg.u.s.p, arg.u.s.n, v.u.s.p, v.u.s.n) != NULL;
        } else if (arg.t == V_LIST) {
            for (size_t i = 0; i < arg.u.l->n && !found; i++)
                found = tpl_val_eq(arg.u.l->v[i], v);
        } else if (arg.t == V_DICT) {
            if (!tpl_hashable(v))
                return tpl_rerr(r, "TypeError: unhashable type: '%s'", tpl_py_type_name(v));
            found = tpl_dict_get_val(arg.u.d, v) != NULL;
        } else if (arg.t != V_UNDEF) {
            return tpl_rerr(r, "TypeError: argument of type '%s' is not iterable", tpl_py_type_name(arg));
        }
        *out = found;
        return 0;
    }
    case T_FILTER: *out = v.t == V_STR && tpl_filter_lookup(v.u.s.p, v.u.s.n) != 0; return 0;
    case T_TEST: *out = v.t == V_STR && tpl_test_lookup(v.u.s.p, v.u.s.n) != 0; return 0;
    }
    return tpl_rerr(r, "internal error: unknown test %d", id);
}

/* ------------------------------------------------------------------------------------------- methods */

static bool has_prefix_any(render *r, val self, val pre, bool suffix, bool *out)
{
    (void)r;
    if (pre.t == V_STR) {
        size_t pn = pre.u.s.n;
        *out = pn <= self.u.s.n &&
               memcmp(suffix ? self.u.s.p + self.u.s.n - pn : self.u.s.p, pre.u.s.p, pn) == 0;
        return true;
    }
    if (pre.t == V_LIST && pre.tuple) {
        for (size_t i = 0; i < pre.u.l->n; i++) {
            bool hit;
            if (!has_prefix_any(r, self, pre.u.l->v[i], suffix, &hit))
                return false;
            if (hit) {
                *out = true;
                return true;
            }
        }
        *out = false;
        return true;
    }
    return false;
}

static int str_find(render *r, val self, cargs *a, bool from_right, bool raise, val *out)
{
    val sub;
    if (!tpl_get_arg(a, 0, "sub", &sub) || sub.t != V_STR)
        return tpl_rerr(r, "TypeError: must be str");
    const char *s = self.u.s.p, *hit = NULL;
    size_t n = self.u.s.n;
    if (!from_right) {
        hit = sub.u.s.n == 0 ? s : memmem(s, n, sub.u.s.p, sub.u.s.n);
    } else if (sub.u.s.n <= n) {
        for (size_t j = n - sub.u.s.n + 1; j-- > 0;)
            if (memcmp(s + j, sub.u.s.p, sub.u.s.n) == 0) {
                hit = s + j;
                break;
            }
    }
    if (!hit) {
        if (raise)
            return tpl_rerr(r, "ValueError: substring not found");
        *out = v_int(-1);
        return 0;
    }
    *out = v_int((int64_t)tpl_u8_len(s, (size_t)(hit - s)));
    return 0;
}

int tpl_method_apply(render *r, int id, val self, cargs *a, val *out, bool *found)
{
    *found = true;
    if (self.t == V_STR) {
        const char *s = self.u.s.p, *cp = NULL;
        size_t n = self.u.s.n, cn = 0;
        bool has;
        int64_t k;
        switch (id) {
        case M_STRIP:
        case M_LSTRIP:
        case M_RSTRIP:
            if (arg_str(r, a, 0, "chars", &cp, &cn, &has))
                return -1;
            *out = do_strip(s, n, has ? cp : NULL, cn, id != M_RSTRIP, id != M_LSTRIP);
            return 0;
        case M_SPLIT:
        case M_RSPLIT:
            if (arg_str(r, a, 0, "sep", &cp, &cn, &has) || arg_int(r, a, 1, "maxsplit", -1, &k))
                return -1;
            return do_split(r, s, n, cp, cn, has, k, id == M_RSPLIT, out);
        case M_SPLITLINES: {
            vlist *l;
            if (splitlines(r, s, n, &l))
                return -1;
            *out = mk_list(l, false);
            return 0;
        }
        case M_STARTSWITH:
        case M_ENDSWITH: {
            val pre;
            bool hit;
            if (!tpl_get_arg(a, 0, "prefix", &pre) || !has_prefix_any(r, self, pre, id == M_ENDSWITH, &hit))
                return tpl_rerr(r, "TypeError: %s first arg must be str or a tuple of str, not %s",
                            id == M_STARTSWITH ? "startswith" : "endswith", tpl_py_type_name(pre));
            *out = v_bool(hit);
            return 0;
        }
        case M_REPLACE: {
            val old, nw;
            if (!tpl_get_arg(a, 0, "old", &old) || !tpl_get_arg(a, 1, "new", &nw) || old.t != V_STR || nw.t != V_STR)
                return tpl_rerr(r, "TypeError: replace() arguments must be str");
            if (arg_int(r, a, 2, "count", -1, &k))
                return -1;
            return do_replace(r, s, n, old.u.s.p, old.u.s.n, nw.u.s.p, nw.u.s.n, k, out);
        }
        case M_UPPER: return change_case(r, s, n, TPL_CASE_UPPER, out);
        case M_LOWER: return change_case(r, s, n, TPL_CASE_LOWER, out);
        case M_TITLE: return change_case(r, s, n, TPL_CASE_TITLE, out);
        case M_CAPITALIZE: return change_case(r, s, n, TPL_CASE_CAPITALIZE, out);
        case M_FIND: return str_find(r, self, a, false, false, out);
        case M_RFIND: return str_find(r, self, a, true, false, out);
        case M_INDEX: return str_find(r, self, a, false, true, out);
        case M_RINDEX: return str_find(r, self, a, true, true, out);
        case M_COUNT: {
            val sub;
            if (!tpl_get_arg(a, 0, "sub", &sub) || sub.t != V_STR)
                return tpl_rerr(r, "TypeError: must be str");
            int64_t cnt = 0;
            if (sub.u.s.n == 0) {
                cnt = (int64_t)tpl_u8_len(s, n) + 1;
            } else {
                size_t i = 0;
                const char *hit;
                while (i < n && (hit = memmem(s + i, n - i, sub.u.s.p, sub.u.s.n)) != NULL) {
                    cnt++;
                    i = (size_t)(hit - s) + sub.u.s.n;
                }
            }
            *out = v_int(cnt);
            return 0;
        }
        case M_JOIN: {
            val it;
            vlist *items;
            if (!tpl_get_arg(a, 0, "iterable", &it) || tpl_val_iter(r, it, &items))
                return -1;
            sbuf b;
            tpl_sb_init(&b, &r->a, 128);
            for (size_t i = 0; i < items->n; i++) {
                if (items->v[i].t != V_STR)
                    return tpl_rerr(r, "TypeError: sequence item %zu: expected str instance, %s found", i,
                                tpl_py_type_name(items->v[i]));
                if (i)
                    tpl_sb_put(&b, s, n);
                tpl_sb_put(&b, items->v[i].u.s.p, items->v[i].u.s.n);
            }
            return str_new(r, &b, out);
        }
        case M_ISDIGIT:
        case M_ISALPHA:
        case M_ISALNUM:
        case M_ISSPACE: {
            bool all = n > 0;
            size_t i = 0;
            while (i < n && all) {
                size_t adv;
                uint32_t c = tpl_u8_decode(s + i, n - i, &adv);
                all = id == M_ISDIGIT ? tpl_cp_digit(c) : id == M_ISALPHA ? tpl_cp_alpha(c)
                    : id == M_ISALNUM ? tpl_cp_alnum(c) : tpl_py_isspace_cp(c);
                i += adv;
            }
            *out = v_bool(all);
            return 0;
        }
        case M_ISLOWER: *out = v_bool(str_all(self, 0)); return 0;
        case M_ISUPPER: *out = v_bool(str_all(self, 1)); return 0;
        }
    } else if (self.t == V_DICT) {
        switch (id) {
        case M_GET: {
            val key, dflt = v_none();
            if (!tpl_get_arg(a, 0, "key", &key))
                return tpl_rerr(r, "TypeError: get expected at least 1 argument, got 0");
            tpl_get_arg(a, 1, "default", &dflt);
            val *v = tpl_dict_get_val(self.u.d, key);
            *out = v ? *v : dflt;
            return 0;
        }
        case M_ITEMS:
        case M_KEYS:
        case M_VALUES: {
            vlist *l = tpl_list_new(&r->a, self.u.d->n);
            if (!l)
                return oom(r);
            for (size_t i = 0; i < self.u.d->n; i++) {
                if (id == M_KEYS) {
                    l->v[l->n++] = self.u.d->k[i];
                } else if (id == M_VALUES) {
                    l->v[l->n++] = self.u.d->v[i];
                } else {
                    vlist *pair = tpl_list_new(&r->a, 2);
                    if (!pair)
                        return oom(r);
                    pair->v[0] = self.u.d->k[i];
                    pair->v[1] = self.u.d->v[i];
                    pair->n = 2;
                    l->v[l->n++] = mk_list(pair, true);
                }
            }
            *out = mk_list(l, false);
            out->tuple = id == M_ITEMS ? VIEW_ITEMS : id == M_KEYS ? VIEW_KEYS : VIEW_VALUES;
            return 0;
        }
        }
    } else if (self.t == V_LOOP && id == M_CYCLE) {
        if (a->npos == 0)
            return tpl_rerr(r, "TypeError: no items for cycling given");
        *out = a->pos[self.u.loop->index0 % (size_t)a->npos];
        return 0;
    } else if (self.t == V_LIST && (id == M_INDEX || id == M_COUNT)) {
        val x;
        if (!tpl_get_arg(a, 0, "value", &x))
            return tpl_rerr(r, "TypeError: expected 1 argument");
        int64_t cnt = 0;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (tpl_val_eq(self.u.l->v[i], x)) {
                if (id == M_INDEX) {
                    *out = v_int((int64_t)i);
                    return 0;
                }
                cnt++;
            }
        if (id == M_INDEX)
            return tpl_rerr(r, "ValueError: value is not in list");
        *out = v_int(cnt);
        return 0;
    }
    *found = false;
    return 0;
}

/* ------------------------------------------------------------------------------------------- globals */

int tpl_function_apply(render *r, int fn, cargs *a, val *out)
{
    switch (fn) {
    case FN_RANGE: {
        int64_t start = 0, stop, step = 1;
        if (a->npos < 1 || a->npos > 3)
            return tpl_rerr(r, "TypeError: range expected 1 to 3 arguments, got %d", a->npos);
        for (int i = 0; i < a->npos; i++)
            if (a->pos[i].t != V_INT && a->pos[i].t != V_BOOL)
                return tpl_rerr(r, "TypeError: '%s' object cannot be interpreted as an integer", tpl_py_type_name(a->pos[i]));
        if (a->npos == 1)
            stop = a->pos[0].u.i;
        else {
            start = a->pos[0].u.i;
            stop = a->pos[1].u.i;
            if (a->npos == 3)
                step = a->pos[2].u.i;
        }
        if (step == 0)
            return tpl_rerr(r, "ValueError: range() arg 3 must not be zero");
        int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                 : (start > stop ? (start - stop - step - 1) / -step : 0);
        /* the sandbox's MAX_RANGE */
        if (count > 100000)
            return tpl_rerr(r, "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        vlist *l = tpl_list_new(&r->a, (size_t)count);
        if (!l)
            return oom(r);
        for (int64_t i = 0; i < count; i++)
            l->v[l->n++] = v_int(start + i * step);
        *out = mk_list(l, false);
        return 0;
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        vdict *d = tpl_dict_new(&r->a, (size_t)(a->nkw + 1));
        if (!d)
            return oom(r);
        if (a->npos > 1)
            return tpl_rerr(r, "TypeError: %s expected at most 1 positional argument", fn == FN_DICT ? "dict" : "namespace");
        if (a->npos == 1) {
            val src = a->pos[0];
            if (src.t == V_DICT || src.t == V_NS) {
                for (size_t i = 0; i < src.u.d->n; i++)
                    if (tpl_dict_set(&r->a, d, src.u.d->k[i], src.u.d->v[i]))
                        return oom(r);
            } else if (src.t == V_LIST) {
                for (size_t i = 0; i < src.u.l->n; i++) {
                    val p = src.u.l->v[i];
                    if (p.t != V_LIST || p.u.l->n != 2)
                        return tpl_rerr(r, "ValueError: dictionary update sequence element has wrong length");
                    if (tpl_dict_set(&r->a, d, p.u.l->v[0], p.u.l->v[1]))
                        return oom(r);
                }
            } else {
                return tpl_rerr(r, "TypeError: '%s' object is not iterable", tpl_py_type_name(src));
            }
        }
        for (int i = 0; i < a->nkw; i++)
            if (tpl_dict_set(&r->a, d, v_str(a->kw[i], a->kwlen[i]), a->kwv[i]))
                return oom(r);
        if (fn == FN_NAMESPACE)
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].t == V_STR && d->k[i].u.s.n && d->k[i].u.s.p[0] == '_')
                    return tpl_rerr(r, "SecurityError: cannot store underscore-prefixed attribute '%.*s' on a namespace",
                                (int)d->k[i].u.s.n, d->k[i].u.s.p);
        out->t = fn == FN_DICT ? V_DICT : V_NS;
        out->tuple = 0;
        out->u.d = d;
        return 0;
    }
    case FN_RAISE: {
        val msg = v_str("", 0), s;
        tpl_get_arg(a, 0, "message", &msg);
        if (tpl_val_to_str(r, msg, &s))
            return -1;
        return tpl_rerr(r, "%.*s", (int)s.u.s.n, s.u.s.p);
    }
    case FN_STRFTIME: {
        val fmt;
        if (!tpl_get_arg(a, 0, "format", &fmt) || fmt.t != V_STR)
            return tpl_rerr(r, "TypeError: strftime_now needs a format string");
        time_t t = r->now_fixed ? (time_t)r->now : time(NULL);
        struct tm tm;
        if (r->now_fixed)
            gmtime_r(&t, &tm);
        else
            localtime_r(&t, &tm);
        char *f = tpl_arena_memdup(&r->a, fmt.u.s.p, fmt.u.s.n);
        char buf[512];
        if (!f)
            return oom(r);
        size_t k = fmt.u.s.n == 0 ? 0 : strftime(buf, sizeof(buf), f, &tm);
        if (fmt.u.s.n && k == 0)
            return tpl_rerr(r, "ValueError: strftime_now format too long or empty result");
        char *res = tpl_arena_memdup(&r->a, buf, k);
        if (!res)
            return oom(r);
        *out = v_str(res, k);
        return 0;
    }
    }
    return tpl_rerr(r, "internal error: unknown function %d", fn);
}
