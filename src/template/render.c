#define _GNU_SOURCE
/* Rendering: evaluates the syntax tree against a JSON context with jinja2's semantics (Python values,
 * scoping, undefined behaviour). One arena per render holds every value; the output is copied out once. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "srt/chat_template.h"
#include "template/tpl.h"

#define RENDER_ARENA_LIMIT (256u << 20)
#define MAX_CALL_DEPTH     200

enum { X_OK = 0, X_ERR = -1, X_BREAK = 1, X_CONTINUE = 2 };

int tpl_rerr(render *r, const char *fmt, ...)
{
    if (r->a.exhausted) {
        srt_err_set(r->err, "chat template: render exceeded its memory limit");
        return -1;
    }
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    srt_err_set(r->err, "%s", msg);
    return -1;
}

static int oom(render *r)
{
    r->a.exhausted = true;
    return tpl_rerr(r, "out of memory");
}

/* jinja2's UndefinedError text for an undefined value: a missing name or a missing attribute/item. */
static int undefined_error(render *r, val u)
{
    if (u.fn == 0)
        return tpl_rerr(r, "UndefinedError: '%.*s' is undefined", (int)u.u.s.n, u.u.s.p ? u.u.s.p : "");
    if (u.fn == 0xFF)
        return tpl_rerr(r, "UndefinedError: list object has no element %.*s", (int)u.u.s.n, u.u.s.p);
    val t = {0};
    t.t = u.fn;
    return tpl_rerr(r, "UndefinedError: '%s object' has no attribute '%.*s'", tpl_py_type_name(t), (int)u.u.s.n,
                u.u.s.p);
}

static val undef_named(const char *p, size_t n, uint8_t container_type)
{
    val u = v_undef();
    u.u.s.p = p;
    u.u.s.n = n;
    u.fn = container_type;
    return u;
}

bool tpl_truthy(val v)
{
    switch (v.t) {
    case V_UNDEF: case V_NONE: return false;
    case V_BOOL: case V_INT: return v.u.i != 0;
    case V_FLOAT: return v.u.f != 0.0;
    case V_STR: return v.u.s.n != 0;
    case V_LIST: return v.u.l->n != 0;
    case V_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(val v)
{
    return v.t == V_INT || v.t == V_BOOL || v.t == V_FLOAT || v.t == V_BIGINT;
}

/* Big integers take part in arithmetic as doubles: Python would be exact, no chat template cares. */
static double num_f(val v)
{
    return v.t == V_FLOAT ? v.u.f : v.t == V_BIGINT ? strtod(v.u.s.p, NULL) : (double)v.u.i;
}

static bool float_like(val v)
{
    return v.t == V_FLOAT || v.t == V_BIGINT;
}

/* Integers beyond int64 (Python has no limit): exact through __int128, then decimal text. */
static bool to_i128(val v, __int128 *out)
{
    if (v.t == V_INT || v.t == V_BOOL) {
        *out = v.u.i;
        return true;
    }
    if (v.t != V_BIGINT || v.u.s.n > 38 || v.u.s.n == 0)
        return false;
    const char *s = v.u.s.p;
    size_t n = v.u.s.n, i = 0;
    bool neg = s[0] == '-';
    if (neg)
        i++;
    __int128 acc = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        acc = acc * 10 + (s[i] - '0');
    }
    *out = neg ? -acc : acc;
    return true;
}

int tpl_make_int(render *r, __int128 x, val *out)
{
    if (x >= INT64_MIN && x <= INT64_MAX) {
        *out = v_int((int64_t)x);
        return 0;
    }
    char buf[48];
    size_t k = sizeof(buf);
    bool neg = x < 0;
    unsigned __int128 u = neg ? (unsigned __int128)0 - (unsigned __int128)x : (unsigned __int128)x;
    do {
        buf[--k] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    if (neg)
        buf[--k] = '-';
    char *p = tpl_arena_memdup(&r->a, buf + k, sizeof(buf) - k);
    if (!p)
        return oom(r);
    val b = {0};
    b.t = V_BIGINT;
    b.u.s.p = p;
    b.u.s.n = sizeof(buf) - k;
    *out = b;
    return 0;
}

bool tpl_val_eq(val a, val b)
{
    if (a.t == V_BIGINT && b.t == V_BIGINT)
        return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    if (is_num(a) && is_num(b)) {
        if (!float_like(a) && !float_like(b))
            return a.u.i == b.u.i;
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case V_LIST:
        if (a.tuple != b.tuple || a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!tpl_val_eq(a.u.l->v[i], b.u.l->v[i]))
                return false;
        return true;
    case V_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            val *o = tpl_dict_get_val(b.u.d, a.u.d->k[i]);
            if (!o || !tpl_val_eq(a.u.d->v[i], *o))
                return false;
        }
        return true;
    case V_NS: return a.u.d == b.u.d;
    case V_MACRO: return a.u.m == b.u.m;
    case V_FUNC: return a.fn == b.fn;
    case V_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

int tpl_val_cmp(render *r, val a, val b, int *out)
{
    if (a.t == V_UNDEF)
        return undefined_error(r, a);
    if (b.t == V_UNDEF)
        return undefined_error(r, b);
    if (is_num(a) && is_num(b)) {
        if (!float_like(a) && !float_like(b))
            *out = a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        else {
            double x = num_f(a), y = num_f(b);
            *out = x < y ? -1 : x > y;
        }
        return 0;
    }
    if (a.t == V_STR && b.t == V_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = memcmp(a.u.s.p, b.u.s.p, n);
        *out = c ? (c < 0 ? -1 : 1) : (a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n);
        return 0;
    }
    if (a.t == V_LIST && b.t == V_LIST && a.tuple == b.tuple) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (tpl_val_eq(a.u.l->v[i], b.u.l->v[i]))
                continue;
            return tpl_val_cmp(r, a.u.l->v[i], b.u.l->v[i], out);
        }
        *out = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    return tpl_rerr(r, "TypeError: '<' not supported between instances of '%s' and '%s'", tpl_py_type_name(a),
                tpl_py_type_name(b));
}

int tpl_val_len(render *r, val v, int64_t *out)
{
    switch (v.t) {
    case V_UNDEF: *out = 0; return 0;
    case V_STR: *out = (int64_t)tpl_u8_len(v.u.s.p, v.u.s.n); return 0;
    case V_LIST: *out = (int64_t)v.u.l->n; return 0;
    case V_DICT: *out = (int64_t)v.u.d->n; return 0;
    default: return tpl_rerr(r, "TypeError: object of type '%s' has no len()", tpl_py_type_name(v));
    }
}

int tpl_val_iter(render *r, val v, vlist **out)
{
    switch (v.t) {
    case V_UNDEF:
        *out = tpl_list_new(&r->a, 0);
        return *out ? 0 : oom(r);
    case V_LIST:
        *out = v.u.l;
        return 0;
    case V_DICT: {
        vlist *l = tpl_list_new(&r->a, v.u.d->n);
        if (!l)
            return oom(r);
        if (v.u.d->n)
            memcpy(l->v, v.u.d->k, v.u.d->n * sizeof(val));
        l->n = v.u.d->n;
        *out = l;
        return 0;
    }
    case V_STR: {
        vlist *l = tpl_list_new(&r->a, v.u.s.n);
        if (!l)
            return oom(r);
        size_t i = 0;
        while (i < v.u.s.n) {
            size_t adv;
            tpl_u8_decode(v.u.s.p + i, v.u.s.n - i, &adv);
            l->v[l->n++] = v_str(v.u.s.p + i, adv);
            i += adv;
        }
        *out = l;
        return 0;
    }
    default:
        return tpl_rerr(r, "TypeError: '%s' object is not iterable", tpl_py_type_name(v));
    }
}

int tpl_val_to_str(render *r, val v, val *out)
{
    if (v.t == V_STR) {
        *out = v;
        return 0;
    }
    sbuf b;
    tpl_sb_init(&b, &r->a, 32);
    tpl_py_str(&b, v);
    if (b.oom)
        return oom(r);
    *out = v_str(b.p, b.n);
    return 0;
}

static val loop_attr(tpl_loop *l, const char *name, size_t n, bool *ok)
{
    size_t len = l->items->n, i = l->index0;
    *ok = true;
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
    if (IS("index")) return v_int((int64_t)i + 1);
    if (IS("index0")) return v_int((int64_t)i);
    if (IS("revindex")) return v_int((int64_t)(len - i));
    if (IS("revindex0")) return v_int((int64_t)(len - i - 1));
    if (IS("first")) return v_bool(i == 0);
    if (IS("last")) return v_bool(i + 1 == len);
    if (IS("length")) return v_int((int64_t)len);
    if (IS("depth")) return v_int(1);
    if (IS("depth0")) return v_int(0);
    if (IS("previtem")) return i > 0 ? l->items->v[i - 1] : undef_named("previtem", 8, 0);
    if (IS("nextitem")) return i + 1 < len ? l->items->v[i + 1] : undef_named("nextitem", 8, 0);
#undef IS
    *ok = false;
    return v_undef();
}

/* Python method names per type: `obj.name` without a call yields a bound method in jinja2 (for dicts
 * even when a key of that name exists), so such attributes are defined and callable. */
static const char *const STR_METHODS[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill",
    NULL};
/* ImmutableSandboxedEnvironment hides the mutating ones (append, pop, update...): they are undefined. */
static const char *const LIST_METHODS[] = {"copy", "count", "index", NULL};
static const char *const DICT_METHODS[] = {"copy", "fromkeys", "get", "items", "keys", "values", NULL};

static bool bound_method(val obj, const char *name, size_t n, val *out)
{
    const char *const *names = obj.t == V_STR ? STR_METHODS : obj.t == V_LIST ? LIST_METHODS
                             : obj.t == V_DICT ? DICT_METHODS : NULL;
    for (int i = 0; names && names[i]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], name, n) == 0) {
            val m = {0};
            m.t = V_FUNC;
            m.fn = 0;
            m.u.s.p = names[i];
            m.u.s.n = n;
            *out = m;
            return true;
        }
    return false;
}

int tpl_val_getattr(render *r, val obj, const char *name, size_t n, val *out)
{
    if (bound_method(obj, name, n, out))
        return 0;
    switch (obj.t) {
    case V_UNDEF:
        return undefined_error(r, obj);
    case V_DICT:
    case V_NS: {
        val *v = tpl_dict_get(obj.u.d, name, n);
        *out = v ? *v : undef_named(name, n, obj.t);
        return 0;
    }
    case V_LOOP: {
        bool ok;
        *out = loop_attr(obj.u.loop, name, n, &ok);
        if (!ok)
            *out = undef_named(name, n, V_LOOP);
        return 0;
    }
    default:
        *out = undef_named(name, n, obj.t);
        return 0;
    }
}

static bool as_index(val k, int64_t *i)
{
    if (k.t == V_INT || k.t == V_BOOL) {
        *i = k.u.i;
        return true;
    }
    return false;
}

int tpl_val_getitem(render *r, val obj, val key, val *out)
{
    int64_t i;
    switch (obj.t) {
    case V_UNDEF:
        return undefined_error(r, obj);
    case V_DICT:
    case V_NS: {
        val *v = tpl_dict_get_val(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
        break;
    }
    case V_LIST:
        if (as_index(key, &i)) {
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                *out = obj.u.l->v[i];
                return 0;
            }
            sbuf b;
            tpl_sb_init(&b, &r->a, 24);
            tpl_sb_printf(&b, "%lld", (long long)key.u.i);
            *out = undef_named(b.p, b.n, 0xFF);
            return 0;
        }
        break;
    case V_STR:
        if (as_index(key, &i)) {
            int64_t n = (int64_t)tpl_u8_len(obj.u.s.p, obj.u.s.n);
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                size_t off = tpl_u8_offset(obj.u.s.p, obj.u.s.n, (size_t)i), adv;
                tpl_u8_decode(obj.u.s.p + off, obj.u.s.n - off, &adv);
                *out = v_str(obj.u.s.p + off, adv);
                return 0;
            }
            *out = v_undef();
            return 0;
        }
        break;
    case V_LOOP:
        if (key.t == V_STR)
            return tpl_val_getattr(r, obj, key.u.s.p, key.u.s.n, out);
        break;
    default:
        break;
    }
    if (key.t == V_STR)
        *out = undef_named(key.u.s.p, key.u.s.n, obj.t);
    else
        *out = v_undef();
    return 0;
}

/* Python slice semantics (PySlice_AdjustIndices) over a list or the code points of a string. */
static int do_slice(render *r, val obj, val vs, val ve, val vst, val *out)
{
    if (obj.t == V_UNDEF)
        return undefined_error(r, obj);
    if (obj.t == V_DICT)
        return tpl_rerr(r, "TypeError: unhashable type: 'slice'");
    int64_t step = 1, start, stop;
    if (vst.t != V_NONE && vst.t != V_UNDEF && !as_index(vst, &step))
        return tpl_rerr(r, "TypeError: slice indices must be integers or None");
    if (step == 0)
        return tpl_rerr(r, "ValueError: slice step cannot be zero");
    bool ascii = obj.t == V_STR && tpl_u8_is_ascii(obj.u.s.p, obj.u.s.n);
    int64_t len;
    if (obj.t == V_LIST)
        len = (int64_t)obj.u.l->n;
    else if (obj.t == V_STR)
        len = ascii ? (int64_t)obj.u.s.n : (int64_t)tpl_u8_len(obj.u.s.p, obj.u.s.n);
    else /* jinja2 compiles slices to plain Python subscripts: no undefined fallback */
        return tpl_rerr(r, "TypeError: '%s' object is not subscriptable", tpl_py_type_name(obj));
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? len - 1 : len;
    if (vs.t == V_NONE || vs.t == V_UNDEF)
        start = step < 0 ? hi : lo;
    else if (!as_index(vs, &start))
        return tpl_rerr(r, "TypeError: slice indices must be integers or None");
    else {
        if (start < 0)
            start += len;
        if (start < lo)
            start = lo;
        if (start > hi)
            start = hi;
    }
    if (ve.t == V_NONE || ve.t == V_UNDEF)
        stop = step < 0 ? lo : hi;
    else if (!as_index(ve, &stop))
        return tpl_rerr(r, "TypeError: slice indices must be integers or None");
    else {
        if (stop < 0)
            stop += len;
        if (stop < lo)
            stop = lo;
        if (stop > hi)
            stop = hi;
    }
    if (obj.t == V_LIST) {
        vlist *l = tpl_list_new(&r->a, 0);
        if (!l)
            return oom(r);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            if (tpl_list_push(&r->a, l, obj.u.l->v[i]))
                return oom(r);
        *out = (val){.t = V_LIST, .tuple = obj.tuple, .u.l = l};
        return 0;
    }
    const char *s = obj.u.s.p;
    size_t n = obj.u.s.n;
    if (step == 1) {
        if (stop <= start) {
            *out = v_str("", 0);
            return 0;
        }
        size_t a = ascii ? (size_t)start : tpl_u8_offset(s, n, (size_t)start);
        size_t b = ascii ? (size_t)stop : tpl_u8_offset(s, n, (size_t)stop);
        *out = v_str(s + a, b - a);
        return 0;
    }
    /* General step: index the code points first. */
    size_t *offs = tpl_arena_alloc(&r->a, ((size_t)len + 1) * sizeof(size_t));
    if (!offs)
        return oom(r);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            offs[k++] = i;
    offs[k] = n;
    sbuf b;
    tpl_sb_init(&b, &r->a, n + 1);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        tpl_sb_put(&b, s + offs[i], offs[i + 1] - offs[i]);
    if (b.oom)
        return oom(r);
    *out = v_str(b.p, b.n);
    return 0;
}

/* ------------------------------------------------------------------------------------------- arithmetic */

static int num_operand(render *r, int op, val x, val y)
{
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (x.t == V_UNDEF)
        return undefined_error(r, x);
    if (y.t == V_UNDEF)
        return undefined_error(r, y);
    return tpl_rerr(r, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op <= OP_POW ? names[op] : "?",
                tpl_py_type_name(x), tpl_py_type_name(y));
}

static int repeat(render *r, val seq, int64_t times, val *out)
{
    if (times < 0)
        times = 0;
    if (seq.t == V_STR) {
        if (seq.u.s.n && (uint64_t)times > RENDER_ARENA_LIMIT / seq.u.s.n)
            return tpl_rerr(r, "MemoryError: string repetition too large");
        sbuf b;
        tpl_sb_init(&b, &r->a, seq.u.s.n * (size_t)times + 1);
        for (int64_t i = 0; i < times; i++)
            tpl_sb_put(&b, seq.u.s.p, seq.u.s.n);
        if (b.oom)
            return oom(r);
        *out = v_str(b.p, b.n);
        return 0;
    }
    if (seq.u.l->n && (uint64_t)times > RENDER_ARENA_LIMIT / (seq.u.l->n * sizeof(val)))
        return tpl_rerr(r, "MemoryError: list repetition too large");
    vlist *l = tpl_list_new(&r->a, seq.u.l->n * (size_t)times);
    if (!l)
        return oom(r);
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < seq.u.l->n; j++)
            l->v[l->n++] = seq.u.l->v[j];
    *out = (val){.t = V_LIST, .tuple = seq.tuple, .u.l = l};
    return 0;
}

int tpl_binop(render *r, int op, val x, val y, val *out)
{
    if (op == OP_CONCAT) {
        sbuf b;
        tpl_sb_init(&b, &r->a, 64);
        tpl_py_str(&b, x);
        tpl_py_str(&b, y);
        if (b.oom)
            return oom(r);
        *out = v_str(b.p, b.n);
        return 0;
    }
    if (op == OP_MOD && x.t == V_STR) {
        cargs a = {0};
        if (y.t == V_LIST && y.tuple) {
            a.pos = y.u.l->v;
            a.npos = (int)y.u.l->n;
        } else {
            a.pos = &y;
            a.npos = 1;
        }
        return tpl_filter_apply(r, tpl_filter_lookup("format", 6), x, &a, out);
    }
    __int128 xi, yi, ri;
    if ((op == OP_ADD || op == OP_SUB || op == OP_MUL || op == OP_FLOORDIV || op == OP_MOD) && to_i128(x, &xi) &&
        to_i128(y, &yi) && (x.t == V_BIGINT || y.t == V_BIGINT || op <= OP_MUL)) {
        bool ovf = false;
        if (op == OP_ADD)
            ovf = __builtin_add_overflow(xi, yi, &ri);
        else if (op == OP_SUB)
            ovf = __builtin_sub_overflow(xi, yi, &ri);
        else if (op == OP_MUL)
            ovf = __builtin_mul_overflow(xi, yi, &ri);
        else {
            if (yi == 0)
                return tpl_rerr(r, "ZeroDivisionError: integer division or modulo by zero");
            __int128 q = xi / yi, m = xi % yi;
            if (m != 0 && ((m < 0) != (yi < 0))) {
                q--;
                m += yi;
            }
            ri = op == OP_MOD ? m : q;
        }
        if (!ovf)
            return tpl_make_int(r, ri, out);
    }
    if (is_num(x) && is_num(y)) {
        bool fl = float_like(x) || float_like(y);
        int64_t a = x.u.i, b = y.u.i, res;
        double fa = num_f(x), fb = num_f(y);
        switch (op) {
        case OP_ADD:
            if (!fl && !__builtin_add_overflow(a, b, &res)) {
                *out = v_int(res);
                return 0;
            }
            *out = v_float(fa + fb);
            return 0;
        case OP_SUB:
            if (!fl && !__builtin_sub_overflow(a, b, &res)) {
                *out = v_int(res);
                return 0;
            }
            *out = v_float(fa - fb);
            return 0;
        case OP_MUL:
            if (!fl && !__builtin_mul_overflow(a, b, &res)) {
                *out = v_int(res);
                return 0;
            }
            *out = v_float(fa * fb);
            return 0;
        case OP_DIV:
            if (fb == 0.0)
                return tpl_rerr(r, "ZeroDivisionError: division by zero");
            *out = v_float(fa / fb);
            return 0;
        case OP_FLOORDIV:
        case OP_MOD:
            if (fl ? fb == 0.0 : b == 0)
                return tpl_rerr(r, op == OP_MOD && !fl ? "ZeroDivisionError: integer modulo by zero"
                                                   : "ZeroDivisionError: integer division or modulo by zero");
            if (!fl) {
                if (a == INT64_MIN && b == -1) {
                    *out = op == OP_MOD ? v_int(0) : v_float(-(double)INT64_MIN);
                    return 0;
                }
                int64_t q = a / b, m = a % b;
                if (m != 0 && ((m < 0) != (b < 0))) {
                    q--;
                    m += b;
                }
                *out = v_int(op == OP_MOD ? m : q);
                return 0;
            } else {
                double m = fmod(fa, fb);
                if (m != 0 && ((m < 0) != (fb < 0)))
                    m += fb;
                *out = op == OP_MOD ? v_float(m) : v_float(floor((fa - m) / fb + 0.5 - 0.5));
                if (op == OP_FLOORDIV)
                    out->u.f = floor(fa / fb);
                return 0;
            }
        case OP_POW:
            if (!fl && b >= 0) {
                int64_t acc = 1, base = a;
                int64_t e = b;
                bool ovf = false;
                while (e > 0 && !ovf) {
                    if (e & 1)
                        ovf |= __builtin_mul_overflow(acc, base, &acc);
                    e >>= 1;
                    if (e)
                        ovf |= __builtin_mul_overflow(base, base, &base);
                }
                if (!ovf) {
                    *out = v_int(acc);
                    return 0;
                }
            }
            if (fa == 0.0 && fb < 0)
                return tpl_rerr(r, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
            *out = v_float(pow(fa, fb));
            return 0;
        }
    }
    if (op == OP_ADD && x.t == V_STR && y.t == V_STR) {
        char *p = tpl_arena_alloc(&r->a, x.u.s.n + y.u.s.n + 1);
        if (!p)
            return oom(r);
        memcpy(p, x.u.s.p, x.u.s.n);
        memcpy(p + x.u.s.n, y.u.s.p, y.u.s.n);
        p[x.u.s.n + y.u.s.n] = '\0';
        *out = v_str(p, x.u.s.n + y.u.s.n);
        return 0;
    }
    if (op == OP_ADD && x.t == V_LIST && y.t == V_LIST && x.tuple == y.tuple) {
        vlist *l = tpl_list_new(&r->a, x.u.l->n + y.u.l->n);
        if (!l)
            return oom(r);
        if (x.u.l->n)
            memcpy(l->v, x.u.l->v, x.u.l->n * sizeof(val));
        if (y.u.l->n)
            memcpy(l->v + x.u.l->n, y.u.l->v, y.u.l->n * sizeof(val));
        l->n = x.u.l->n + y.u.l->n;
        *out = (val){.t = V_LIST, .tuple = x.tuple, .u.l = l};
        return 0;
    }
    if (op == OP_MUL) {
        if ((x.t == V_STR || x.t == V_LIST) && (y.t == V_INT || y.t == V_BOOL))
            return repeat(r, x, y.u.i, out);
        if ((y.t == V_STR || y.t == V_LIST) && (x.t == V_INT || x.t == V_BOOL))
            return repeat(r, y, x.u.i, out);
    }
    if (op == OP_ADD && x.t == V_STR && y.t != V_UNDEF)
        return tpl_rerr(r, "TypeError: can only concatenate str (not \"%s\") to str", tpl_py_type_name(y));
    if (op == OP_ADD && x.t == V_LIST && !x.tuple && y.t != V_UNDEF)
        return tpl_rerr(r, "TypeError: can only concatenate list (not \"%s\") to list", tpl_py_type_name(y));
    return num_operand(r, op, x, y);
}

static int contains(render *r, val item, val container, bool *out)
{
    switch (container.t) {
    case V_UNDEF:
        *out = false;
        return 0;
    case V_STR:
        if (item.t == V_UNDEF)
            return undefined_error(r, item);
        if (item.t != V_STR)
            return tpl_rerr(r, "TypeError: 'in <string>' requires string as left operand, not %s", tpl_py_type_name(item));
        if (item.u.s.n == 0) {
            *out = true;
            return 0;
        }
        *out = item.u.s.n <= container.u.s.n &&
               memmem(container.u.s.p, container.u.s.n, item.u.s.p, item.u.s.n) != NULL;
        return 0;
    case V_LIST:
        for (size_t i = 0; i < container.u.l->n; i++)
            if (tpl_val_eq(container.u.l->v[i], item)) {
                *out = true;
                return 0;
            }
        *out = false;
        return 0;
    case V_DICT:
        if (!tpl_hashable(item))
            return tpl_rerr(r, "TypeError: unhashable type: '%s'", tpl_py_type_name(item));
        *out = tpl_dict_get_val(container.u.d, item) != NULL;
        return 0;
    default:
        return tpl_rerr(r, "TypeError: argument of type '%s' is not iterable", tpl_py_type_name(container));
    }
}

/* --------------------------------------------------------------------------------------------- scoping */

static frame *frame_new(render *r, frame *parent)
{
    frame *f = tpl_arena_alloc(&r->a, sizeof(*f));
    if (!f)
        return NULL;
    f->parent = parent;
    f->vars = NULL;
    f->n = f->cap = 0;
    return f;
}

static int frame_set(render *r, frame *f, const char *p, size_t n, val v)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->vars[i].n == n && memcmp(f->vars[i].p, p, n) == 0) {
            f->vars[i].v = v;
            return 0;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 4;
        struct var *nv = tpl_arena_alloc(&r->a, cap * sizeof(*nv));
        if (!nv)
            return oom(r);
        if (f->n)
            memcpy(nv, f->vars, f->n * sizeof(*nv));
        f->vars = nv;
        f->cap = cap;
    }
    f->vars[f->n].p = p;
    f->vars[f->n].n = n;
    f->vars[f->n].v = v;
    f->n++;
    return 0;
}

static val lookup(render *r, frame *f, const char *p, size_t n)
{
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (f->vars[i].n == n && memcmp(f->vars[i].p, p, n) == 0)
                return f->vars[i].v;
    val *v = tpl_dict_get(r->ctx, p, n);
    if (v)
        return *v;
    int fn = tpl_function_lookup(p, n);
    if (fn) {
        val g = {0};
        g.t = V_FUNC;
        g.fn = (uint8_t)fn;
        return g;
    }
    return undef_named(p, n, 0);
}

/* ------------------------------------------------------------------------------------------ evaluation */

static int eval(render *r, const expr *e, frame *f, val *out);
static int exec_body(render *r, const stmt *s, frame *f, sbuf *out);

int tpl_get_arg(cargs *a, int pos, const char *name, val *out)
{
    if (pos >= 0 && pos < a->npos) {
        *out = a->pos[pos];
        return 1;
    }
    size_t n = strlen(name);
    for (int i = 0; i < a->nkw; i++)
        if (a->kwlen[i] == n && memcmp(a->kw[i], name, n) == 0) {
            *out = a->kwv[i];
            return 1;
        }
    return 0;
}

static int eval_args(render *r, const expr *e, frame *f, cargs *a)
{
    memset(a, 0, sizeof(*a));
    if (!e->nargs)
        return 0;
    a->pos = tpl_arena_alloc(&r->a, (size_t)e->nargs * sizeof(val));
    a->kwv = tpl_arena_alloc(&r->a, (size_t)e->nargs * sizeof(val));
    a->kw = tpl_arena_alloc(&r->a, (size_t)e->nargs * sizeof(char *));
    a->kwlen = tpl_arena_alloc(&r->a, (size_t)e->nargs * sizeof(size_t));
    if (!a->pos || !a->kwv || !a->kw || !a->kwlen)
        return oom(r);
    for (int i = 0; i < e->nargs; i++) {
        val v;
        if (eval(r, e->args[i], f, &v))
            return -1;
        if (e->kw && e->kw[i]) {
            a->kw[a->nkw] = e->kw[i];
            a->kwlen[a->nkw] = e->kwlen[i];
            a->kwv[a->nkw++] = v;
        } else {
            a->pos[a->npos++] = v;
        }
    }
    return 0;
}

static int call_with_caller(render *r, val m, cargs *a, val caller, val *out);

int tpl_call_macro(render *r, val m, cargs *a, val *out)
{
    return call_with_caller(r, m, a, v_undef(), out);
}

static int call_with_caller(render *r, val m, cargs *a, val caller, val *out)
{
    if (m.t == V_FUNC && m.fn == 0)
        return tpl_rerr(r, "TemplateRuntimeError: calling the method '%.*s' through a variable is not supported",
                    (int)m.u.s.n, m.u.s.p);
    if (m.t == V_FUNC)
        return tpl_function_apply(r, m.fn, a, out);
    if (m.t == V_UNDEF)
        return undefined_error(r, m);
    if (m.t != V_MACRO)
        return tpl_rerr(r, "TypeError: '%s' object is not callable", tpl_py_type_name(m));
    if (r->depth >= MAX_CALL_DEPTH)
        return tpl_rerr(r, "RecursionError: macro calls nested deeper than %d", MAX_CALL_DEPTH);
    const stmt *def = m.u.m->def;
    frame *f = frame_new(r, m.u.m->closure);
    if (!f)
        return oom(r);
    int np = def->ntargets;
    vlist *varargs = tpl_list_new(&r->a, 0);
    vdict *kwargs = tpl_dict_new(&r->a, 0);
    if (!varargs || !kwargs)
        return oom(r);
    bool *bound = tpl_arena_alloc(&r->a, (size_t)(np ? np : 1) * sizeof(bool));
    if (!bound)
        return oom(r);
    memset(bound, 0, (size_t)(np ? np : 1) * sizeof(bool));
    for (int i = 0; i < a->npos; i++) {
        if (i < np) {
            if (frame_set(r, f, def->targets[i].p, def->targets[i].n, a->pos[i]))
                return -1;
            bound[i] = true;
        } else if (tpl_list_push(&r->a, varargs, a->pos[i])) {
            return oom(r);
        }
    }
    for (int k = 0; k < a->nkw; k++) {
        int i;
        for (i = 0; i < np; i++)
            if (def->targets[i].n == a->kwlen[k] && memcmp(def->targets[i].p, a->kw[k], a->kwlen[k]) == 0)
                break;
        if (i < np) {
            if (bound[i])
                return tpl_rerr(r, "TypeError: macro got multiple values for argument '%.*s'", (int)a->kwlen[k],
                            a->kw[k]);
            if (frame_set(r, f, def->targets[i].p, def->targets[i].n, a->kwv[k]))
                return -1;
            bound[i] = true;
        } else if (tpl_dict_set(&r->a, kwargs, v_str(a->kw[k], a->kwlen[k]), a->kwv[k])) {
            return oom(r);
        }
    }
    r->depth++;
    for (int i = 0; i < np; i++) {
        if (bound[i])
            continue;
        val v = undef_named(def->targets[i].p, def->targets[i].n, 0);
        if (def->defaults && def->defaults[i] && eval(r, def->defaults[i], f, &v)) {
            r->depth--;
            return -1;
        }
        if (frame_set(r, f, def->targets[i].p, def->targets[i].n, v)) {
            r->depth--;
            return -1;
        }
    }
    val va = {.t = V_LIST, .tuple = 1, .u.l = varargs}, kw = {.t = V_DICT, .u.d = kwargs};
    if (frame_set(r, f, "varargs", 7, va) || frame_set(r, f, "kwargs", 6, kw) ||
        (caller.t == V_MACRO && frame_set(r, f, "caller", 6, caller))) {
        r->depth--;
        return -1;
    }
    sbuf b;
    tpl_sb_init(&b, &r->a, 256);
    int rc = exec_body(r, def->body, f, &b);
    r->depth--;
    if (rc == X_ERR)
        return -1;
    if (b.oom)
        return oom(r);
    *out = v_str(b.p, b.n);
    return 0;
}

static int eval_call(render *r, const expr *e, frame *f, val caller, val *out)
{
    cargs a;
    if (e->kind == E_METHOD) {
        val self;
        if (eval(r, e->a, f, &self))
            return -1;
        if (self.t == V_UNDEF)
            return undefined_error(r, self);
        if (eval_args(r, e, f, &a))
            return -1;
        bool found = false;
        if (tpl_method_apply(r, e->id, self, &a, out, &found))
            return -1;
        if (!found) {
            /* A key of that name holding a macro (namespace attributes) is still callable. */
            val attr;
            if (tpl_val_getattr(r, self, e->name, e->name_len, &attr))
                return -1;
            if (attr.t == V_MACRO)
                return call_with_caller(r, attr, &a, caller, out);
            return tpl_rerr(r, "UndefinedError: '%s object' has no attribute '%.*s'", tpl_py_type_name(self),
                        (int)e->name_len, e->name);
        }
        return 0;
    }
    if (eval_args(r, e, f, &a))
        return -1;
    val fn = lookup(r, f, e->name, e->name_len);
    return call_with_caller(r, fn, &a, caller, out);
}

static int eval(render *r, const expr *e, frame *f, val *out)
{
    val x, y;
    switch (e->kind) {
    case E_CONST:
        *out = e->lit;
        return 0;
    case E_NAME:
        *out = lookup(r, f, e->name, e->name_len);
        return 0;
    case E_PLACEHOLDER:
        *out = r->placeholder;
        return 0;
    case E_LIST:
    case E_TUPLE: {
        vlist *l = tpl_list_new(&r->a, (size_t)e->nargs);
        if (!l)
            return oom(r);
        for (int i = 0; i < e->nargs; i++)
            if (eval(r, e->args[i], f, &l->v[l->n++]))
                return -1;
        *out = (val){.t = V_LIST, .tuple = e->kind == E_TUPLE, .u.l = l};
        return 0;
    }
    case E_DICT: {
        vdict *d = tpl_dict_new(&r->a, (size_t)e->nargs / 2);
        if (!d)
            return oom(r);
        for (int i = 0; i + 1 < e->nargs; i += 2) {
            if (eval(r, e->args[i], f, &x) || eval(r, e->args[i + 1], f, &y))
                return -1;
            if (tpl_dict_set(&r->a, d, x, y))
                return oom(r);
        }
        *out = (val){.t = V_DICT, .u.d = d};
        return 0;
    }
    case E_ATTR:
        if (eval(r, e->a, f, &x))
            return -1;
        return tpl_val_getattr(r, x, e->name, e->name_len, out);
    case E_ITEM:
        if (eval(r, e->a, f, &x) || eval(r, e->b, f, &y))
            return -1;
        return tpl_val_getitem(r, x, y, out);
    case E_SLICE: {
        val parts[3] = {v_none(), v_none(), v_none()};
        if (eval(r, e->a, f, &x))
            return -1;
        for (int i = 0; i < 3; i++)
            if (e->args[i] && eval(r, e->args[i], f, &parts[i]))
                return -1;
        return do_slice(r, x, parts[0], parts[1], parts[2], out);
    }
    case E_CALL:
        if (e->id) {
            cargs a;
            if (eval_args(r, e, f, &a))
                return -1;
            /* a template variable of the same name shadows the global */
            val shadow = lookup(r, f, e->name, e->name_len);
            if (shadow.t == V_MACRO)
                return tpl_call_macro(r, shadow, &a, out);
            return tpl_function_apply(r, e->id, &a, out);
        }
        return eval_call(r, e, f, v_undef(), out);
    case E_METHOD:
        return eval_call(r, e, f, v_undef(), out);
    case E_FILTER: {
        cargs a;
        if (eval(r, e->a, f, &x) || eval_args(r, e, f, &a))
            return -1;
        return tpl_filter_apply(r, e->id, x, &a, out);
    }
    case E_TEST: {
        cargs a;
        bool b;
        if (eval(r, e->a, f, &x) || eval_args(r, e, f, &a) || tpl_test_apply(r, e->id, x, &a, &b))
            return -1;
        *out = v_bool(e->op ? !b : b);
        return 0;
    }
    case E_NEG:
    case E_POS:
        if (eval(r, e->a, f, &x))
            return -1;
        if (x.t == V_UNDEF)
            return undefined_error(r, x);
        if (!is_num(x))
            return tpl_rerr(r, "TypeError: bad operand type for unary %c: '%s'", e->kind == E_NEG ? '-' : '+',
                        tpl_py_type_name(x));
        if (e->kind == E_POS)
            *out = x.t == V_BOOL ? v_int(x.u.i) : x;
        else {
            __int128 i;
            if (x.t != V_FLOAT && to_i128(x, &i))
                return tpl_make_int(r, -i, out);
            *out = v_float(-num_f(x));
        }
        return 0;
    case E_NOT:
        if (eval(r, e->a, f, &x))
            return -1;
        *out = v_bool(!tpl_truthy(x));
        return 0;
    case E_AND:
        if (eval(r, e->a, f, &x))
            return -1;
        if (!tpl_truthy(x)) {
            *out = x;
            return 0;
        }
        return eval(r, e->b, f, out);
    case E_OR:
        if (eval(r, e->a, f, &x))
            return -1;
        if (tpl_truthy(x)) {
            *out = x;
            return 0;
        }
        return eval(r, e->b, f, out);
    case E_BIN:
        if (eval(r, e->a, f, &x) || eval(r, e->b, f, &y))
            return -1;
        return tpl_binop(r, e->op, x, y, out);
    case E_CMP: {
        if (eval(r, e->a, f, &x))
            return -1;
        bool res = true;
        for (int i = 0; i < e->nargs && res; i++) {
            if (eval(r, e->args[i], f, &y))
                return -1;
            int c;
            switch (e->ops[i]) {
            case OP_EQ: res = tpl_val_eq(x, y); break;
            case OP_NE: res = !tpl_val_eq(x, y); break;
            case OP_IN:
            case OP_NOTIN:
                if (contains(r, x, y, &res))
                    return -1;
                if (e->ops[i] == OP_NOTIN)
                    res = !res;
                break;
            default:
                if (tpl_val_cmp(r, x, y, &c))
                    return -1;
                res = e->ops[i] == OP_LT ? c < 0 : e->ops[i] == OP_LE ? c <= 0 : e->ops[i] == OP_GT ? c > 0 : c >= 0;
            }
            x = y;
        }
        *out = v_bool(res);
        return 0;
    }
    case E_COND:
        if (eval(r, e->c, f, &x))
            return -1;
        if (tpl_truthy(x))
            return eval(r, e->a, f, out);
        if (e->b)
            return eval(r, e->b, f, out);
        *out = v_undef();
        return 0;
    }
    return tpl_rerr(r, "internal error: unknown expression kind %d", e->kind);
}

/* ------------------------------------------------------------------------------------------ statements */

static int bind_targets(render *r, const stmt *s, frame *f, val v)
{
    if (!s->unpack)
        return frame_set(r, f, s->targets[0].p, s->targets[0].n, v);
    vlist *items;
    if (tpl_val_iter(r, v, &items))
        return -1;
    if ((int)items->n != s->ntargets)
        return tpl_rerr(r, "ValueError: %s values to unpack (expected %d, got %zu)",
                    (int)items->n > s->ntargets ? "too many" : "not enough", s->ntargets, items->n);
    for (int i = 0; i < s->ntargets; i++)
        if (frame_set(r, f, s->targets[i].p, s->targets[i].n, items->v[i]))
            return -1;
    return 0;
}

static int capture(render *r, const stmt *s, frame *f, val *out)
{
    frame *cf = frame_new(r, f);
    if (!cf)
        return oom(r);
    sbuf b;
    tpl_sb_init(&b, &r->a, 256);
    if (exec_body(r, s->body, cf, &b) == X_ERR)
        return -1;
    if (b.oom)
        return oom(r);
    *out = v_str(b.p, b.n);
    if (s->cond) {
        val saved = r->placeholder;
        r->placeholder = *out;
        int rc = eval(r, s->cond, f, out);
        r->placeholder = saved;
        return rc;
    }
    return 0;
}

static int exec_for(render *r, const stmt *s, frame *f, sbuf *out)
{
    val it;
    vlist *items;
    if (eval(r, s->e, f, &it) || tpl_val_iter(r, it, &items))
        return X_ERR;
    if (s->cond) {
        vlist *kept = tpl_list_new(&r->a, items->n);
        if (!kept)
            return oom(r);
        for (size_t i = 0; i < items->n; i++) {
            frame *cf = frame_new(r, f);
            val c;
            if (!cf)
                return oom(r);
            if (bind_targets(r, s, cf, items->v[i]) || eval(r, s->cond, cf, &c))
                return X_ERR;
            if (tpl_truthy(c))
                kept->v[kept->n++] = items->v[i];
        }
        items = kept;
    }
    if (items->n == 0) {
        if (!s->else_body)
            return X_OK;
        frame *ef = frame_new(r, f);
        if (!ef)
            return oom(r);
        return exec_body(r, s->else_body, ef, out);
    }
    tpl_loop *loop = tpl_arena_alloc(&r->a, sizeof(*loop));
    if (!loop)
        return oom(r);
    loop->items = items;
    val lv = {.t = V_LOOP, .u.loop = loop};
    for (size_t i = 0; i < items->n; i++) {
        loop->index0 = i;
        /* Each iteration gets a fresh scope: jinja2 does not carry loop-body assignments over. */
        frame *lf = frame_new(r, f);
        if (!lf)
            return oom(r);
        if (frame_set(r, lf, "loop", 4, lv) || bind_targets(r, s, lf, items->v[i]))
            return X_ERR;
        int rc = exec_body(r, s->body, lf, out);
        if (rc == X_ERR)
            return X_ERR;
        if (rc == X_BREAK)
            break;
    }
    return X_OK;
}

static int exec_stmt(render *r, const stmt *s, frame *f, sbuf *out)
{
    val v;
    switch (s->kind) {
    case S_TEXT:
        tpl_sb_put(out, s->text, s->text_len);
        return X_OK;
    case S_OUTPUT:
        if (eval(r, s->e, f, &v))
            return X_ERR;
        tpl_py_str(out, v);
        return X_OK;
    case S_IF:
        if (eval(r, s->e, f, &v))
            return X_ERR;
        if (tpl_truthy(v))
            return exec_body(r, s->body, f, out);
        return s->else_body ? exec_body(r, s->else_body, f, out) : X_OK;
    case S_FOR:
        return exec_for(r, s, f, out);
    case S_SET:
        if (eval(r, s->e, f, &v))
            return X_ERR;
        return bind_targets(r, s, f, v) ? X_ERR : X_OK;
    case S_SET_ATTR: {
        val ns = lookup(r, f, s->targets[0].p, s->targets[0].n);
        if (ns.t != V_NS)
            return tpl_rerr(r, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        if (s->targets[1].n && s->targets[1].p[0] == '_')
            return tpl_rerr(r, "SecurityError: cannot store underscore-prefixed attribute '%.*s' on a namespace",
                        (int)s->targets[1].n, s->targets[1].p);
        if (eval(r, s->e, f, &v))
            return X_ERR;
        return tpl_dict_set(&r->a, ns.u.d, v_str(s->targets[1].p, s->targets[1].n), v) ? oom(r) : X_OK;
    }
    case S_SET_BLOCK:
        if (capture(r, s, f, &v))
            return X_ERR;
        return frame_set(r, f, s->targets[0].p, s->targets[0].n, v) ? X_ERR : X_OK;
    case S_FILTER_BLOCK:
        if (capture(r, s, f, &v))
            return X_ERR;
        tpl_py_str(out, v);
        return X_OK;
    case S_MACRO: {
        tpl_macro *m = tpl_arena_alloc(&r->a, sizeof(*m));
        if (!m)
            return oom(r);
        m->def = s;
        m->closure = f;
        m->caller = v_undef();
        val mv = {.t = V_MACRO, .u.m = m};
        return frame_set(r, f, s->name.p, s->name.n, mv) ? X_ERR : X_OK;
    }
    case S_CALL_BLOCK: {
        tpl_macro *m = tpl_arena_alloc(&r->a, sizeof(*m));
        if (!m)
            return oom(r);
        m->def = s;
        m->closure = f;
        m->caller = v_undef();
        val cv = {.t = V_MACRO, .u.m = m};
        if (eval_call(r, s->e, f, cv, &v))
            return X_ERR;
        tpl_py_str(out, v);
        return X_OK;
    }
    case S_WITH: {
        frame *wf = frame_new(r, f);
        if (!wf)
            return oom(r);
        for (int i = 0; i < s->ntargets; i++) {
            if (eval(r, s->defaults[i], f, &v) || frame_set(r, wf, s->targets[i].p, s->targets[i].n, v))
                return X_ERR;
        }
        return exec_body(r, s->body, wf, out);
    }
    case S_BODY:
        return exec_body(r, s->body, f, out);
    case S_BREAK:
        return X_BREAK;
    case S_CONTINUE:
        return X_CONTINUE;
    }
    return tpl_rerr(r, "internal error: unknown statement kind %d", s->kind);
}

static int exec_body(render *r, const stmt *s, frame *f, sbuf *out)
{
    for (; s; s = s->next) {
        int rc = exec_stmt(r, s, f, out);
        if (rc != X_OK)
            return rc;
        if (out->oom)
            return oom(r);
    }
    return X_OK;
}

/* --------------------------------------------------------------------------------------- entry points */

int tpl_parse_context(render *r, const char *json, size_t len, vdict **out); /* context.c */

int srt_chat_template_render_at(const srt_chat_template *t, const char *context_json, size_t len, int64_t now,
                                char **out, size_t *out_len, srt_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!t) {
        srt_err_set(err, "chat template: no template");
        return SRT_ERROR;
    }
    render r;
    memset(&r, 0, sizeof(r));
    tpl_arena_init(&r.a, RENDER_ARENA_LIMIT);
    r.err = err;
    r.now = now;
    r.now_fixed = now != INT64_MIN;
    int rc = SRT_ERROR;
    if (tpl_parse_context(&r, context_json, len, &r.ctx) == 0) {
        frame *root = frame_new(&r, NULL);
        sbuf b;
        tpl_sb_init(&b, &r.a, 2048);
        if (!root) {
            oom(&r);
        } else if (exec_body(&r, t->root, root, &b) == X_ERR) {
            /* err is set */
        } else if (b.oom) {
            oom(&r);
        } else {
            char *res = malloc(b.n + 1);
            if (!res) {
                srt_err_set(err, "chat template: out of memory");
            } else {
                memcpy(res, b.p, b.n);
                res[b.n] = '\0';
                *out = res;
                if (out_len)
                    *out_len = b.n;
                rc = SRT_OK;
            }
        }
    }
    tpl_arena_free(&r.a);
    return rc;
}

int srt_chat_template_render(const srt_chat_template *t, const char *context_json, size_t len, char **out,
                             size_t *out_len, srt_err *err)
{
    return srt_chat_template_render_at(t, context_json, len, INT64_MIN, out, out_len, err);
}

void srt_chat_template_free_output(char *out)
{
    free(out);
}
