/* Python's text forms of values: str(), repr() and json.dumps(), as jinja2 and transformers print them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tpl.h"

const char *tpl_py_type_name(val v)
{
    switch (v.t) {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: case V_BIGINT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_LIST:
        return v.tuple == VIEW_ITEMS ? "dict_items" : v.tuple == VIEW_KEYS ? "dict_keys"
             : v.tuple == VIEW_VALUES ? "dict_values" : v.tuple ? "tuple" : "list";
    case V_DICT: return "dict";
    case V_NS: return "Namespace";
    case V_MACRO: return "Macro";
    case V_FUNC: return "function";
    case V_LOOP: return "LoopContext";
    }
    return "object";
}

/* repr(float): the shortest digits that read back to the same double, laid out as Python does
 * (positional for exponents -4..15, otherwise d.ddde+XX). */
void tpl_py_float_repr(sbuf *b, double f)
{
    if (isnan(f)) {
        tpl_sb_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        tpl_sb_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    snprintf(tmp, sizeof(tmp), "%.*e", prec, f);
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    if (neg)
        tpl_sb_putc(b, '-');
    if (exp >= -5 + 1 && exp < 16) {
        if (exp < 0) {
            tpl_sb_puts(b, "0.");
            for (int i = 0; i < -exp - 1; i++)
                tpl_sb_putc(b, '0');
            tpl_sb_put(b, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp; i++)
                tpl_sb_putc(b, i < nd ? digits[i] : '0');
            tpl_sb_putc(b, '.');
            if (nd > exp + 1)
                tpl_sb_put(b, digits + exp + 1, (size_t)(nd - exp - 1));
            else
                tpl_sb_putc(b, '0');
        }
    } else {
        tpl_sb_putc(b, digits[0]);
        if (nd > 1) {
            tpl_sb_putc(b, '.');
            tpl_sb_put(b, digits + 1, (size_t)(nd - 1));
        }
        tpl_sb_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

void tpl_py_repr_str(sbuf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    tpl_sb_putc(b, q);
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            if (c == (unsigned char)q || c == '\\') {
                tpl_sb_putc(b, '\\');
                tpl_sb_putc(b, (char)c);
            } else if (c == '\n')
                tpl_sb_puts(b, "\\n");
            else if (c == '\r')
                tpl_sb_puts(b, "\\r");
            else if (c == '\t')
                tpl_sb_puts(b, "\\t");
            else if (c < 0x20 || c == 0x7F)
                tpl_sb_printf(b, "\\x%02x", c);
            else
                tpl_sb_putc(b, (char)c);
            i++;
            continue;
        }
        size_t adv;
        uint32_t cp = tpl_u8_decode(s + i, n - i, &adv);
        if (tpl_cp_printable(cp) && !(cp >= 0xD800 && cp <= 0xDFFF))
            tpl_sb_put(b, s + i, adv);
        else if (cp <= 0xFF)
            tpl_sb_printf(b, "\\x%02x", cp);
        else if (cp <= 0xFFFF)
            tpl_sb_printf(b, "\\u%04x", cp);
        else
            tpl_sb_printf(b, "\\U%08x", cp);
        i += adv;
    }
    tpl_sb_putc(b, q);
}

static void repr_inner(sbuf *b, val v, int depth)
{
    if (depth > 200) {
        tpl_sb_puts(b, "...");
        return;
    }
    switch (v.t) {
    case V_STR:
        tpl_py_repr_str(b, v.u.s.p, v.u.s.n);
        return;
    case V_UNDEF:
        tpl_sb_puts(b, "Undefined");
        return;
    case V_LIST:
        if (v.tuple >= VIEW_ITEMS) {
            static const char *const views[] = {"dict_items(", "dict_keys(", "dict_values("};
            val plain = v;
            plain.tuple = 0;
            tpl_sb_puts(b, views[v.tuple - VIEW_ITEMS]);
            repr_inner(b, plain, depth);
            tpl_sb_putc(b, ')');
            return;
        }
        tpl_sb_putc(b, v.tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                tpl_sb_puts(b, ", ");
            repr_inner(b, v.u.l->v[i], depth + 1);
        }
        if (v.tuple && v.u.l->n == 1)
            tpl_sb_putc(b, ',');
        tpl_sb_putc(b, v.tuple ? ')' : ']');
        return;
    case V_DICT:
    case V_NS:
        if (v.t == V_NS)
            tpl_sb_puts(b, "<Namespace ");
        tpl_sb_putc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                tpl_sb_puts(b, ", ");
            repr_inner(b, v.u.d->k[i], depth + 1);
            tpl_sb_puts(b, ": ");
            repr_inner(b, v.u.d->v[i], depth + 1);
        }
        tpl_sb_putc(b, '}');
        if (v.t == V_NS)
            tpl_sb_putc(b, '>');
        return;
    default:
        tpl_py_str(b, v);
    }
}

void tpl_py_repr(sbuf *b, val v)
{
    repr_inner(b, v, 0);
}

void tpl_py_str(sbuf *b, val v)
{
    switch (v.t) {
    case V_UNDEF: return;
    case V_NONE: tpl_sb_puts(b, "None"); return;
    case V_BOOL: tpl_sb_puts(b, v.u.i ? "True" : "False"); return;
    case V_INT: tpl_sb_printf(b, "%lld", (long long)v.u.i); return;
    case V_FLOAT: tpl_py_float_repr(b, v.u.f); return;
    case V_STR: case V_BIGINT: tpl_sb_put(b, v.u.s.p, v.u.s.n); return;
    case V_LIST: case V_DICT: case V_NS: repr_inner(b, v, 0); return;
    case V_MACRO:
        tpl_sb_puts(b, "<Macro '");
        if (v.u.m->def->kind == S_MACRO)
            tpl_sb_put(b, v.u.m->def->name.p, v.u.m->def->name.n);
        else
            tpl_sb_puts(b, "caller");
        tpl_sb_puts(b, "'>");
        return;
    case V_FUNC:
        if (v.fn == 0)
            tpl_sb_printf(b, "<built-in method %.*s>", (int)v.u.s.n, v.u.s.p);
        else
            tpl_sb_puts(b, "<function>");
        return;
    case V_LOOP: tpl_sb_printf(b, "<LoopContext %zu/%zu>", v.u.loop->index0 + 1, v.u.loop->items->n); return;
    }
}

static void json_str(sbuf *b, const char *s, size_t n, bool ensure_ascii)
{
    tpl_sb_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            switch (c) {
            case '"': tpl_sb_puts(b, "\\\""); break;
            case '\\': tpl_sb_puts(b, "\\\\"); break;
            case '\n': tpl_sb_puts(b, "\\n"); break;
            case '\r': tpl_sb_puts(b, "\\r"); break;
            case '\t': tpl_sb_puts(b, "\\t"); break;
            case '\b': tpl_sb_puts(b, "\\b"); break;
            case '\f': tpl_sb_puts(b, "\\f"); break;
            default:
                if (c < 0x20)
                    tpl_sb_printf(b, "\\u%04x", c);
                else
                    tpl_sb_putc(b, (char)c);
            }
            i++;
            continue;
        }
        size_t adv;
        uint32_t cp = tpl_u8_decode(s + i, n - i, &adv);
        if (!ensure_ascii)
            tpl_sb_put(b, s + i, adv);
        else if (cp < 0x10000)
            tpl_sb_printf(b, "\\u%04x", cp);
        else {
            cp -= 0x10000;
            tpl_sb_printf(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
        }
        i += adv;
    }
    tpl_sb_putc(b, '"');
}

static void json_float(sbuf *b, double f)
{
    if (isnan(f))
        tpl_sb_puts(b, "NaN");
    else if (isinf(f))
        tpl_sb_puts(b, f < 0 ? "-Infinity" : "Infinity");
    else
        tpl_py_float_repr(b, f);
}

static void json_newline(sbuf *b, const char *indent, size_t indent_len, int level)
{
    tpl_sb_putc(b, '\n');
    for (int i = 0; i < level; i++)
        tpl_sb_put(b, indent, indent_len);
}

static int key_cmp(const void *x, const void *y)
{
    const val *a = *(const val *const *)x, *b = *(const val *const *)y;
    size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
    int c = memcmp(a->u.s.p, b->u.s.p, n);
    if (c)
        return c;
    return a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
}

int tpl_py_json(sbuf *b, val v, bool ensure_ascii, const char *indent, size_t indent_len, bool use_indent,
            const char *item_sep, const char *key_sep, bool sort_keys, int depth, srt_err *err)
{
    if (depth > 500) {
        srt_err_set(err, "ValueError: JSON nesting too deep");
        return -1;
    }
    switch (v.t) {
    case V_NONE: tpl_sb_puts(b, "null"); return 0;
    case V_BOOL: tpl_sb_puts(b, v.u.i ? "true" : "false"); return 0;
    case V_INT: tpl_sb_printf(b, "%lld", (long long)v.u.i); return 0;
    case V_FLOAT: json_float(b, v.u.f); return 0;
    case V_STR: json_str(b, v.u.s.p, v.u.s.n, ensure_ascii); return 0;
    case V_BIGINT: tpl_sb_put(b, v.u.s.p, v.u.s.n); return 0;
    case V_LIST: {
        if (v.tuple >= VIEW_ITEMS) {
            static const char *const views[] = {"dict_items", "dict_keys", "dict_values"};
            srt_err_set(err, "TypeError: Object of type %s is not JSON serializable", views[v.tuple - VIEW_ITEMS]);
            return -1;
        }
        if (v.u.l->n == 0) {
            tpl_sb_puts(b, "[]");
            return 0;
        }
        tpl_sb_putc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                tpl_sb_puts(b, item_sep);
            if (use_indent)
                json_newline(b, indent, indent_len, depth + 1);
            if (tpl_py_json(b, v.u.l->v[i], ensure_ascii, indent, indent_len, use_indent, item_sep, key_sep,
                        sort_keys, depth + 1, err))
                return -1;
        }
        if (use_indent)
            json_newline(b, indent, indent_len, depth);
        tpl_sb_putc(b, ']');
        return 0;
    }
    case V_DICT: {
        vdict *d = v.u.d;
        if (d->n == 0) {
            tpl_sb_puts(b, "{}");
            return 0;
        }
        /* Keys become strings the way json.dumps converts them. */
        val *keys = tpl_arena_alloc(b->a, d->n * sizeof(val));
        const val **order = tpl_arena_alloc(b->a, d->n * sizeof(val *));
        if (!keys || !order) {
            srt_err_set(err, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < d->n; i++) {
            val k = d->k[i];
            if (k.t != V_STR) {
                sbuf kb;
                tpl_sb_init(&kb, b->a, 32);
                if (k.t == V_BOOL)
                    tpl_sb_puts(&kb, k.u.i ? "true" : "false");
                else if (k.t == V_NONE)
                    tpl_sb_puts(&kb, "null");
                else if (k.t == V_INT)
                    tpl_sb_printf(&kb, "%lld", (long long)k.u.i);
                else if (k.t == V_FLOAT)
                    json_float(&kb, k.u.f);
                else {
                    srt_err_set(err, "TypeError: keys must be str, int, float, bool or None, not %s",
                                tpl_py_type_name(k));
                    return -1;
                }
                k = v_str(kb.p, kb.n);
            }
            keys[i] = k;
            order[i] = &keys[i];
        }
        if (sort_keys)
            qsort(order, d->n, sizeof(*order), key_cmp);
        tpl_sb_putc(b, '{');
        for (size_t j = 0; j < d->n; j++) {
            size_t i = (size_t)(order[j] - keys);
            if (j)
                tpl_sb_puts(b, item_sep);
            if (use_indent)
                json_newline(b, indent, indent_len, depth + 1);
            json_str(b, keys[i].u.s.p, keys[i].u.s.n, ensure_ascii);
            tpl_sb_puts(b, key_sep);
            if (tpl_py_json(b, d->v[i], ensure_ascii, indent, indent_len, use_indent, item_sep, key_sep, sort_keys,
                        depth + 1, err))
                return -1;
        }
        if (use_indent)
            json_newline(b, indent, indent_len, depth);
        tpl_sb_putc(b, '}');
        return 0;
    }
    default:
        srt_err_set(err, "TypeError: Object of type %s is not JSON serializable", tpl_py_type_name(v));
        return -1;
    }
}
