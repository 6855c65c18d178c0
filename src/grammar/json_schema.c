/*
 * JSON Schema -> GBNF.
 *
 * The subset and the language are xgrammar's (strict mode), so that masks match it token for
 * token: properties in schema order, required ones present, others optional; no properties beyond
 * those listed unless additionalProperties allows them (they then follow the listed ones, under
 * names not listed); whitespace between JSON tokens is [ \n\r\t]{0,max_ws}. Keywords: type (also a
 * list), properties, required, additionalProperties, enum, const, anyOf, oneOf, allOf of one,
 * items, prefixItems, minItems, maxItems, minLength, maxLength, pattern, format (date, time,
 * date-time, uuid, email), minimum/maximum/exclusiveMinimum/exclusiveMaximum on integers, $ref to
 * #/$defs, #/definitions or # (recursion included), and OpenAPI's nullable (which xgrammar
 * ignores: here it allows null). Keywords that would constrain the output and are not implemented
 * are refused by name; annotations (title, description, default, examples, ...) are ignored.
 */

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_tree.h>

#include "grammar/grammar_internal.h"

int regex_to_gbnf_expr(const char *re, size_t len, sbuf *out, srt_err *err);

#define MAX_DEPTH 64
#define MAX_DEFS  1024


typedef struct {
    char  *ref;
    char   name[32];
} js_def;


typedef struct {
    yajl_val   root;
    sbuf       rules;       /* named rules, appended as they are made */
    int        n_rules;
    int        max_ws;
    int        allow_add;
    srt_err   *err;
    int        failed;
    int        depth;
    js_def     defs[MAX_DEFS];
    int        n_defs;
    char       ws[48];      /* the whitespace expression */
} js;


static const char basic_rules[] =
    "basic_escape ::= [\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]\n"
    "basic_string_sub ::= \"\\\"\" | [^\\x00-\\x1f\"\\\\] basic_string_sub"
    " | \"\\\\\" basic_escape basic_string_sub\n"
    "basic_string ::= \"\\\"\" basic_string_sub\n"
    "basic_integer ::= \"0\" | \"-\"? [1-9] [0-9]*\n"
    "basic_number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [+\\-]? [0-9]+)?\n"
    "basic_boolean ::= \"true\" | \"false\"\n"
    "basic_null ::= \"null\"\n"
    "basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array"
    " | basic_object\n"
    "basic_array ::= \"[\" ws basic_any (ws \",\" ws basic_any)* ws \"]\" | \"[\" ws \"]\"\n"
    "basic_object ::= \"{\" ws basic_string ws \":\" ws basic_any"
    " (ws \",\" ws basic_string ws \":\" ws basic_any)* ws \"}\" | \"{\" ws \"}\"\n";


static int
jfail(js *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int
jfail(js *c, const char *fmt, ...)
{
    char    msg[512];
    va_list ap;

    if (!c->failed) {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        srt_err_set(c->err, "json_schema: %s", msg);
        c->failed = 1;
    }
    return -1;
}


static yajl_val
get(yajl_val obj, const char *key)
{
    size_t i;

    if (!YAJL_IS_OBJECT(obj)) {
        return NULL;
    }
    for (i = 0; i < obj->u.object.len; i++) {
        if (strcmp(obj->u.object.keys[i], key) == 0) {
            return obj->u.object.values[i];
        }
    }
    return NULL;
}


static void
new_rule_name(js *c, char *name, size_t cap)
{
    snprintf(name, cap, "r%d", c->n_rules++);
}


/* The GBNF literal for raw bytes. */
static void
put_literal(sbuf *o, const char *s, size_t n)
{
    size_t i;

    sb_putc(o, '"');
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char) s[i];
        if (ch == '"' || ch == '\\') {
            sb_putc(o, '\\');
            sb_putc(o, (char) ch);
        } else if (ch < 0x20 || ch == 0x7f) {
            sb_printf(o, "\\x%02X", ch);
        } else {
            sb_putc(o, (char) ch);
        }
    }
    sb_putc(o, '"');
}


/* A string as JSON spells it (the way xgrammar serializes: non-ASCII kept). */
static void
json_string(sbuf *o, const char *s)
{
    const unsigned char *p;

    sb_putc(o, '"');
    for (p = (const unsigned char *) s; *p; p++) {
        switch (*p) {
        case '"': sb_puts(o, "\\\""); break;
        case '\\': sb_puts(o, "\\\\"); break;
        case '\n': sb_puts(o, "\\n"); break;
        case '\r': sb_puts(o, "\\r"); break;
        case '\t': sb_puts(o, "\\t"); break;
        case '\b': sb_puts(o, "\\b"); break;
        case '\f': sb_puts(o, "\\f"); break;
        default:
            if (*p < 0x20) {
                sb_printf(o, "\\u%04x", *p);
            } else {
                sb_putc(o, (char) *p);
            }
        }
    }
    sb_putc(o, '"');
}


/* Compact JSON, for enum and const. */
static void
json_serialize(sbuf *o, yajl_val v)
{
    size_t i;

    if (YAJL_IS_STRING(v)) {
        json_string(o, v->u.string);
    } else if (YAJL_IS_NUMBER(v)) {
        sb_puts(o, v->u.number.r);
    } else if (YAJL_IS_TRUE(v)) {
        sb_puts(o, "true");
    } else if (YAJL_IS_FALSE(v)) {
        sb_puts(o, "false");
    } else if (YAJL_IS_OBJECT(v)) {
        sb_putc(o, '{');
        for (i = 0; i < v->u.object.len; i++) {
            if (i) {
                sb_putc(o, ',');
            }
            json_string(o, v->u.object.keys[i]);
            sb_putc(o, ':');
            json_serialize(o, v->u.object.values[i]);
        }
        sb_putc(o, '}');
    } else if (YAJL_IS_ARRAY(v)) {
        sb_putc(o, '[');
        for (i = 0; i < v->u.array.len; i++) {
            if (i) {
                sb_putc(o, ',');
            }
            json_serialize(o, v->u.array.values[i]);
        }
        sb_putc(o, ']');
    } else {
        sb_puts(o, "null");
    }
}


static int js_schema(js *c, yajl_val s, sbuf *o);


/* Adds `name ::= body` where body is generated by the caller into b. */
static void
add_rule(js *c, const char *name, sbuf *b)
{
    sb_puts(&c->rules, name);
    sb_puts(&c->rules, " ::= ");
    sb_put(&c->rules, b->p ? b->p : "\"\"", b->p ? b->len : 2);
    sb_putc(&c->rules, '\n');
}


/* ---- integers ---- */

static void
digits_range(sbuf *o, const char *x, const char *y, size_t n)
{
    /* canonical strings of n digits from x to y (same length, x <= y) */
    size_t i;
    int    x_low, y_high;

    if (n == 0) {
        sb_puts(o, "\"\"");
        return;
    }
    if (x[0] == y[0]) {
        sb_printf(o, "\"%c\" (", x[0]);
        digits_range(o, x + 1, y + 1, n - 1);
        sb_putc(o, ')');
        return;
    }
    x_low = 1;
    y_high = 1;
    for (i = 1; i < n; i++) {
        x_low &= x[i] == '0';
        y_high &= y[i] == '9';
    }
    sb_putc(o, '(');
    if (x_low) {
        sb_printf(o, "[%c-%c]", x[0], y_high ? y[0] : y[0] - 1);
        if (n > 1) {
            sb_printf(o, " [0-9]{%zu}", n - 1);
        }
        if (!y_high) {
            sb_printf(o, " | \"%c\" (", y[0]);
            char lo[32];
            memset(lo, '0', n - 1);
            digits_range(o, lo, y + 1, n - 1);
            sb_putc(o, ')');
        }
        sb_putc(o, ')');
        return;
    }
    {
        char hi[32], lo[32];
        memset(hi, '9', n - 1);
        memset(lo, '0', n - 1);
        sb_printf(o, "\"%c\" (", x[0]);
        digits_range(o, x + 1, hi, n - 1);
        sb_putc(o, ')');
        if (y[0] - x[0] > 1) {
            sb_printf(o, " | [%c-%c] [0-9]{%zu}", x[0] + 1, y_high ? y[0] : y[0] - 1, n - 1);
        } else if (y_high) {
            sb_printf(o, " | \"%c\" [0-9]{%zu}", y[0], n - 1);
        }
        if (!y_high) {
            sb_printf(o, " | \"%c\" (", y[0]);
            digits_range(o, lo, y + 1, n - 1);
            sb_putc(o, ')');
        }
        if (y_high && y[0] - x[0] > 1) {
            /* [x0+1 .. y0] covered above */
        }
    }
    sb_putc(o, ')');
}


/* positive integers a..b (b < 0: unbounded), a >= 1 */
static void
pos_range(sbuf *o, long long a, long long b)
{
    char   sa[32], sb_[32], lo[32], hi[32];
    int    la, lb, d, first = 1;

    la = snprintf(sa, sizeof(sa), "%lld", a);
    lb = b < 0 ? la : snprintf(sb_, sizeof(sb_), "%lld", b);
    sb_putc(o, '(');
    for (d = la; d <= lb; d++) {
        long long from = d == la ? a : 1, to;
        int k;
        for (k = 1; k < d; k++) {
            if (d != la) from *= 10;
        }
        if (b < 0 || d < lb) {
            to = 9;
            for (k = 1; k < d; k++) {
                to = to * 10 + 9;
            }
        } else {
            to = b;
        }
        if (from > to) {
            continue;
        }
        snprintf(lo, sizeof(lo), "%lld", from);
        snprintf(hi, sizeof(hi), "%lld", to);
        if (!first) {
            sb_puts(o, " | ");
        }
        first = 0;
        sb_putc(o, '(');
        digits_range(o, lo, hi, (size_t) d);
        sb_putc(o, ')');
    }
    if (b < 0) {
        sb_printf(o, "%s[1-9] [0-9]{%d,}", first ? "" : " | ", la);
    }
    sb_putc(o, ')');
}


static int
get_bound(js *c, yajl_val s, const char *key, int upper, long long *out, int *set)
{
    yajl_val v = get(s, key);
    double   d;
    int      excl = strncmp(key, "exclusive", 9) == 0;

    if (v == NULL) {
        return 0;
    }
    if (YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v)) {
        return jfail(c, "boolean '%s' (draft 4) is not supported", key);
    }
    if (!YAJL_IS_NUMBER(v)) {
        return jfail(c, "'%s' must be a number", key);
    }
    if (YAJL_IS_INTEGER(v)) {
        *out = YAJL_GET_INTEGER(v);
    } else {
        d = YAJL_GET_DOUBLE(v);
        d = upper ? floor(d) : ceil(d);
        if (d > 9e18 || d < -9e18) {
            return jfail(c, "'%s' is out of range", key);
        }
        if (excl && d == YAJL_GET_DOUBLE(v)) {
            *out = (long long) d;
        } else {
            *out = (long long) d;
            excl = 0;
        }
    }
    if (excl) {
        if (upper) {
            (*out)--;
        } else {
            (*out)++;
        }
    }
    if (*set) {
        /* both forms given: the tighter one */
        return 1;
    }
    *set = 1;
    return 0;
}


static int
js_integer(js *c, yajl_val s, sbuf *o)
{
    long long lo = 0, hi = 0, t;
    int       has_lo = 0, has_hi = 0, tmp;

    if (get_bound(c, s, "minimum", 0, &lo, &has_lo) < 0) return -1;
    tmp = has_lo;
    if (get(s, "exclusiveMinimum")) {
        t = 0;
        int set = 0;
        if (get_bound(c, s, "exclusiveMinimum", 0, &t, &set) < 0) return -1;
        if (!tmp || t > lo) lo = t;
        has_lo = 1;
    }
    tmp = has_hi;
    if (get_bound(c, s, "maximum", 1, &hi, &has_hi) < 0) return -1;
    tmp = has_hi;
    if (get(s, "exclusiveMaximum")) {
        t = 0;
        int set = 0;
        if (get_bound(c, s, "exclusiveMaximum", 1, &t, &set) < 0) return -1;
        if (!tmp || t < hi) hi = t;
        has_hi = 1;
    }
    if (!has_lo && !has_hi) {
        sb_puts(o, "basic_integer");
        return 0;
    }
    if (has_lo && has_hi && lo > hi) {
        return jfail(c, "minimum %lld is above maximum %lld: no integer fits", lo, hi);
    }
    if ((has_lo && (lo < -999999999999999999LL || lo > 999999999999999999LL))
        || (has_hi && (hi < -999999999999999999LL || hi > 999999999999999999LL)))
    {
        return jfail(c, "integer bounds beyond 18 digits are not supported");
    }
    sb_putc(o, '(');
    {
        int first = 1;
        /* negatives: "-" and the positive range [max(1, -hi), -lo] */
        if (!has_lo || lo < 0) {
            long long a = has_hi ? (hi < 0 ? -hi : 1) : 1;
            long long b = has_lo ? -lo : -1;
            if (!has_hi || hi < 0 || a <= b || b < 0) {
                if (b < 0 || a <= b) {
                    sb_puts(o, "\"-\" ");
                    pos_range(o, a, b);
                    first = 0;
                }
            }
        }
        if ((!has_lo || lo <= 0) && (!has_hi || hi >= 0)) {
            sb_printf(o, "%s\"0\"", first ? "" : " | ");
            first = 0;
        }
        if (!has_hi || hi > 0) {
            long long a = has_lo && lo > 1 ? lo : 1;
            sb_printf(o, "%s", first ? "" : " | ");
            pos_range(o, a, has_hi ? hi : -1);
            first = 0;
        }
    }
    sb_putc(o, ')');
    return 0;
}


/* ---- strings ---- */

static int
js_string(js *c, yajl_val s, sbuf *o)
{
    yajl_val    fmt = get(s, "format"), pat = get(s, "pattern");
    yajl_val    mn = get(s, "minLength"), mx = get(s, "maxLength");
    long long   lo = 0, hi = -1;
    const char *f;

    if (fmt && !YAJL_IS_STRING(fmt)) {
        return jfail(c, "'format' must be a string");
    }
    if ((fmt != NULL) + (pat != NULL) + (mn != NULL || mx != NULL) > 1) {
        return jfail(c, "combining format, pattern and minLength/maxLength is not supported");
    }
    if (pat) {
        if (!YAJL_IS_STRING(pat)) {
            return jfail(c, "'pattern' must be a string");
        }
        sb_puts(o, "\"\\\"\" ");
        if (regex_to_gbnf_expr(pat->u.string, strlen(pat->u.string), o, c->err) != 0) {
            char msg[sizeof(c->err->msg)];
            memcpy(msg, c->err->msg, sizeof(msg));
            return jfail(c, "pattern: %s", msg);
        }
        sb_puts(o, " \"\\\"\"");
        return 0;
    }
    if (mn || mx) {
        if ((mn && (!YAJL_IS_INTEGER(mn) || YAJL_GET_INTEGER(mn) < 0))
            || (mx && (!YAJL_IS_INTEGER(mx) || YAJL_GET_INTEGER(mx) < 0)))
        {
            return jfail(c, "'minLength' and 'maxLength' must be non-negative integers");
        }
        lo = mn ? YAJL_GET_INTEGER(mn) : 0;
        hi = mx ? YAJL_GET_INTEGER(mx) : -1;
        if (lo > 10000 || hi > 10000) {
            return jfail(c, "'minLength'/'maxLength' over 10000 are not supported");
        }
        if (hi >= 0 && hi < lo) {
            return jfail(c, "'maxLength' is below 'minLength'");
        }
        if (hi >= 0) {
            sb_printf(o, "\"\\\"\" [^\"\\\\\\r\\n]{%lld,%lld} \"\\\"\"", lo, hi);
        } else {
            sb_printf(o, "\"\\\"\" [^\"\\\\\\r\\n]{%lld,} \"\\\"\"", lo);
        }
        return 0;
    }
    if (fmt == NULL) {
        sb_puts(o, "basic_string");
        return 0;
    }
    f = fmt->u.string;
#define TZ   "(\"Z\" | [+\\-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"
#define TIME "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" ([0-5] [0-9] | \"60\")" \
             " (\".\" [0-9]+)? " TZ
#define DATE "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [1-2] [0-9]" \
             " | \"3\" [01])"
    if (strcmp(f, "date") == 0) {
        sb_puts(o, "\"\\\"\" " DATE " \"\\\"\"");
    } else if (strcmp(f, "time") == 0) {
        sb_puts(o, "\"\\\"\" " TIME " \"\\\"\"");
    } else if (strcmp(f, "date-time") == 0) {
        sb_puts(o, "\"\\\"\" " DATE " \"T\" " TIME " \"\\\"\"");
    } else if (strcmp(f, "uuid") == 0) {
        sb_puts(o, "\"\\\"\" [0-9A-Fa-f]{8} \"-\" [0-9A-Fa-f]{4} \"-\" [0-9A-Fa-f]{4} \"-\""
                   " [0-9A-Fa-f]{4} \"-\" [0-9A-Fa-f]{12} \"\\\"\"");
    } else if (strcmp(f, "email") == 0) {
        sb_puts(o, "\"\\\"\" ("
                "[a-zA-Z0-9_!#$%&'*+/=?^`{|}~\\-]+ (\".\" [a-zA-Z0-9_!#$%&'*+/=?^`{|}~\\-]+)*"
                " | \"\\\\\\\"\" (\"\\\\\" [ -~] | [ !#-[\\]-~])* \"\\\\\\\"\")"
                " \"@\" [A-Za-z0-9] ([\\-A-Za-z0-9]* [A-Za-z0-9])?"
                " (\".\" [A-Za-z0-9] [\\-A-Za-z0-9]* [A-Za-z0-9])* \"\\\"\"");
    } else {
        return jfail(c, "format '%s' is not supported (date, time, date-time, uuid, email are)",
                     f);
    }
#undef TZ
#undef TIME
#undef DATE
    return 0;
}


/* ---- objects ---- */

typedef struct {
    const uint32_t *cp;
    int             n;
} name_cp;


static int
utf8_decode(const char *s, uint32_t *out)
{
    const unsigned char *p = (const unsigned char *) s;
    int                  n = 0;

    while (*p) {
        uint32_t c;
        int      k;
        if (*p < 0x80) { c = *p++; k = 0; }
        else if ((*p & 0xE0) == 0xC0) { c = *p++ & 0x1F; k = 1; }
        else if ((*p & 0xF0) == 0xE0) { c = *p++ & 0x0F; k = 2; }
        else { c = *p++ & 0x07; k = 3; }
        while (k-- && *p) {
            c = (c << 6) | (*p++ & 0x3F);
        }
        out[n++] = c;
    }
    return n;
}


/* The rest of a key string (after its opening quote) that is none of names[] (from depth d). */
static void
excl_key(js *c, name_cp *names, int n, int d, sbuf *o)
{
    int       i, j, has_empty = 0, first;
    uint32_t  firsts[256];
    int       n_first = 0;

    for (i = 0; i < n; i++) {
        if (names[i].n == d) {
            has_empty = 1;
        } else {
            for (j = 0; j < n_first && firsts[j] != names[i].cp[d]; j++) { }
            if (j == n_first && n_first < 256) {
                firsts[n_first++] = names[i].cp[d];
            }
        }
    }
    first = 1;
    sb_putc(o, '(');
    if (!has_empty) {
        sb_puts(o, "\"\\\"\"");
        first = 0;
    }
    sb_printf(o, "%s[^\\x00-\\x1f\"\\\\", first ? "" : " | ");
    for (j = 0; j < n_first; j++) {
        sb_printf(o, "\\U%08X", firsts[j]);
    }
    sb_puts(o, "] basic_string_sub | \"\\\\\" basic_escape basic_string_sub");
    for (j = 0; j < n_first; j++) {
        name_cp  sub[256];
        int      k = 0;
        char     rn[32];
        sbuf     body = { NULL, 0, 0, 0 };
        for (i = 0; i < n; i++) {
            if (names[i].n > d && names[i].cp[d] == firsts[j] && k < 256) {
                sub[k++] = names[i];
            }
        }
        new_rule_name(c, rn, sizeof(rn));
        excl_key(c, sub, k, d + 1, &body);
        add_rule(c, rn, &body);
        free(body.p);
        sb_printf(o, " | [\\U%08X] %s", firsts[j], rn);
    }
    sb_putc(o, ')');
}


static int
js_object(js *c, yajl_val s, sbuf *o)
{
    yajl_val    props = get(s, "properties"), req = get(s, "required");
    yajl_val    add = get(s, "additionalProperties");
    size_t      n, i, j;
    int         first_req = -1, allow_add, any_req = 0;
    char      **kv, addl[32] = "";
    int        *is_req;
    char        part[32];
    sbuf        b = { NULL, 0, 0, 0 };
    const char *ws = c->ws;

    if (props && !YAJL_IS_OBJECT(props)) {
        return jfail(c, "'properties' must be an object");
    }
    if (req && !YAJL_IS_ARRAY(req)) {
        return jfail(c, "'required' must be an array");
    }
    if (add && !YAJL_IS_TRUE(add) && !YAJL_IS_FALSE(add) && !YAJL_IS_OBJECT(add)) {
        return jfail(c, "'additionalProperties' must be a boolean or a schema");
    }
    n = props ? props->u.object.len : 0;
    if (n == 0 && (add == NULL || YAJL_IS_TRUE(add)) && (req == NULL || req->u.array.len == 0)) {
        sb_puts(o, "basic_object");
        return 0;
    }
    allow_add = add ? !YAJL_IS_FALSE(add) : (n == 0 ? 1 : c->allow_add);

    for (i = 0; req && i < req->u.array.len; i++) {
        yajl_val r = req->u.array.values[i];
        int      found = 0;
        if (!YAJL_IS_STRING(r)) {
            return jfail(c, "'required' must hold strings");
        }
        for (j = 0; j < n; j++) {
            found |= strcmp(props->u.object.keys[j], r->u.string) == 0;
        }
        if (!found) {
            return jfail(c, "required property '%s' is not in 'properties'", r->u.string);
        }
    }

    kv = calloc(n + 1, sizeof(char *));
    is_req = calloc(n + 1, sizeof(int));
    if (kv == NULL || is_req == NULL) {
        free(kv);
        free(is_req);
        return jfail(c, "out of memory");
    }
    for (i = 0; i < n; i++) {
        sbuf e = { NULL, 0, 0, 0 }, key = { NULL, 0, 0, 0 };
        for (j = 0; req && j < req->u.array.len; j++) {
            if (strcmp(req->u.array.values[j]->u.string, props->u.object.keys[i]) == 0) {
                is_req[i] = 1;
            }
        }
        if (is_req[i] && first_req < 0) {
            first_req = (int) i;
        }
        any_req |= is_req[i];
        json_string(&key, props->u.object.keys[i]);
        put_literal(&e, key.p, key.len);
        free(key.p);
        sb_printf(&e, " %s \":\" %s ", ws, ws);
        if (js_schema(c, props->u.object.values[i], &e) != 0) {
            free(e.p);
            goto failed;
        }
        kv[i] = e.p;
    }

    if (allow_add) {
        /* additional key: any string but the listed names */
        sbuf       kb = { NULL, 0, 0, 0 };
        name_cp   *names = calloc(n + 1, sizeof(name_cp));
        uint32_t  *cps = NULL;
        size_t     total = 0;
        for (i = 0; i < n; i++) {
            total += strlen(props->u.object.keys[i]);
        }
        cps = malloc((total + 1) * sizeof(uint32_t));
        if (names == NULL || cps == NULL) {
            free(names);
            free(cps);
            jfail(c, "out of memory");
            goto failed;
        }
        total = 0;
        for (i = 0; i < n; i++) {
            names[i].cp = cps + total;
            names[i].n = utf8_decode(props->u.object.keys[i], cps + total);
            total += (size_t) names[i].n;
        }
        sb_puts(&kb, "\"\\\"\" ");
        excl_key(c, names, (int) n, 0, &kb);
        sb_printf(&kb, " %s \":\" %s ", ws, ws);
        free(names);
        free(cps);
        if (add && YAJL_IS_OBJECT(add)) {
            if (js_schema(c, add, &kb) != 0) {
                free(kb.p);
                goto failed;
            }
        } else {
            sb_puts(&kb, "basic_any");
        }
        new_rule_name(c, addl, sizeof(addl));
        add_rule(c, addl, &kb);
        free(kb.p);
    }

    /* part_i: properties i.. each after a comma; the last part takes additional ones */
    {
        char (*parts)[32] = calloc(n + 1, sizeof(*parts));
        if (parts == NULL) {
            jfail(c, "out of memory");
            goto failed;
        }
        for (i = n + 1; i-- > 0; ) {
            sbuf pb = { NULL, 0, 0, 0 };
            if (i == n) {
                if (allow_add) {
                    sb_printf(&pb, "(%s \",\" %s %s)*", ws, ws, addl);
                } else {
                    sb_puts(&pb, "\"\"");
                }
            } else if (is_req[i]) {
                sb_printf(&pb, "%s \",\" %s %s %s", ws, ws, kv[i], parts[i + 1]);
            } else {
                sb_printf(&pb, "%s | %s \",\" %s %s %s", parts[i + 1], ws, ws, kv[i],
                          parts[i + 1]);
            }
            new_rule_name(c, parts[i], sizeof(parts[i]));
            add_rule(c, parts[i], &pb);
            free(pb.p);
        }
        /* the first property written: any up to the first required one */
        sb_printf(&b, "\"{\" %s (", ws);
        {
            size_t last = first_req >= 0 ? (size_t) first_req : (n ? n - 1 : 0);
            int    alts = 0;
            for (j = 0; n && j <= last; j++) {
                sb_printf(&b, "%s%s %s", alts++ ? " | " : "", kv[j], parts[j + 1]);
            }
            if (allow_add && !any_req) {
                sb_printf(&b, "%s%s %s", alts++ ? " | " : "", addl, parts[n]);
            }
        }
        sb_printf(&b, ") %s \"}\"", ws);
        if (!any_req) {
            sb_printf(&b, " | \"{\" %s \"}\"", ws);
        }
        strcpy(part, "");
        free(parts);
    }
    sb_putc(o, '(');
    sb_put(o, b.p, b.len);
    sb_putc(o, ')');
    free(b.p);
    for (i = 0; i < n; i++) {
        free(kv[i]);
    }
    free(kv);
    free(is_req);
    return 0;

failed:
    for (i = 0; i < n; i++) {
        free(kv[i]);
    }
    free(kv);
    free(is_req);
    free(b.p);
    return -1;
}


/* ---- arrays ---- */

static int
js_array(js *c, yajl_val s, sbuf *o)
{
    yajl_val    items = get(s, "items"), prefix = get(s, "prefixItems");
    yajl_val    mn = get(s, "minItems"), mx = get(s, "maxItems");
    yajl_val    uniq = get(s, "uniqueItems"), contains = get(s, "contains");
    long long   lo = 0, hi = -1;
    sbuf        it = { NULL, 0, 0, 0 };
    const char *ws = c->ws;
    size_t      i;
    char        name[32];

    if (uniq && YAJL_IS_TRUE(uniq)) {
        return jfail(c, "'uniqueItems' is not supported");
    }
    if (contains) {
        return jfail(c, "'contains' is not supported");
    }
    if ((mn && !YAJL_IS_INTEGER(mn)) || (mx && !YAJL_IS_INTEGER(mx))) {
        return jfail(c, "'minItems' and 'maxItems' must be integers");
    }
    lo = mn ? YAJL_GET_INTEGER(mn) : 0;
    hi = mx ? YAJL_GET_INTEGER(mx) : -1;
    if (lo < 0 || lo > 10000 || hi > 10000 || (hi >= 0 && hi < lo)) {
        return jfail(c, "minItems/maxItems out of range (0..10000, min <= max)");
    }

    if (prefix) {
        if (!YAJL_IS_ARRAY(prefix)) {
            return jfail(c, "'prefixItems' must be an array");
        }
        if (mn || mx) {
            return jfail(c, "'prefixItems' with 'minItems'/'maxItems' is not supported");
        }
        if (items && !YAJL_IS_FALSE(items)) {
            return jfail(c, "'items' after 'prefixItems' is not supported");
        }
        /* xgrammar: any prefix of the items */
        char prev[32] = "";
        for (i = prefix->u.array.len; i-- > 0; ) {
            sbuf pb = { NULL, 0, 0, 0 };
            if (i > 0) {
                sb_printf(&pb, "\"\" | %s \",\" %s ", ws, ws);
            } else {
                sb_puts(&pb, "\"\" | ");
            }
            sb_putc(&pb, '(');
            if (js_schema(c, prefix->u.array.values[i], &pb) != 0) {
                free(pb.p);
                return -1;
            }
            sb_printf(&pb, ") %s", prev);
            new_rule_name(c, name, sizeof(name));
            add_rule(c, name, &pb);
            free(pb.p);
            strcpy(prev, name);
        }
        sb_printf(o, "(\"[\" %s %s %s \"]\")", ws, prev[0] ? prev : "", ws);
        return 0;
    }

    if (items == NULL || YAJL_IS_TRUE(items)) {
        sb_puts(&it, "basic_any");
    } else if (YAJL_IS_FALSE(items)) {
        sb_printf(o, "(\"[\" %s \"]\")", ws);
        return 0;
    } else if (js_schema(c, items, &it) != 0) {
        free(it.p);
        return -1;
    }
    if (!mn && !mx && strcmp(it.p, "basic_any") == 0) {
        free(it.p);
        sb_puts(o, "basic_array");
        return 0;
    }
    new_rule_name(c, name, sizeof(name));
    add_rule(c, name, &it);
    free(it.p);
    if (hi == 0) {
        sb_printf(o, "(\"[\" %s \"]\")", ws);
        return 0;
    }
    sb_printf(o, "(\"[\" %s %s (%s \",\" %s %s)", ws, name, ws, ws, name);
    if (hi < 0) {
        sb_printf(o, "{%lld,}", lo > 1 ? lo - 1 : 0);
    } else {
        sb_printf(o, "{%lld,%lld}", lo > 1 ? lo - 1 : 0, hi - 1);
    }
    sb_printf(o, " %s \"]\"", ws);
    if (lo == 0) {
        sb_printf(o, " | \"[\" %s \"]\"", ws);
    }
    sb_putc(o, ')');
    return 0;
}


/* ---- dispatch ---- */

static const char *unsupported_kw[] = {
    "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired",
    "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems",
    "minProperties", "maxProperties", "multipleOf", "minContains", "maxContains",
    "additionalItems", "$dynamicRef", "$recursiveRef", NULL
};


static int
js_ref(js *c, const char *ref, sbuf *o)
{
    int         i;
    yajl_val    target = NULL;
    const char *path;
    sbuf        b = { NULL, 0, 0, 0 };

    for (i = 0; i < c->n_defs; i++) {
        if (strcmp(c->defs[i].ref, ref) == 0) {
            sb_puts(o, c->defs[i].name);
            return 0;
        }
    }
    if (strcmp(ref, "#") == 0) {
        target = c->root;
    } else if (strncmp(ref, "#/$defs/", 8) == 0 || strncmp(ref, "#/definitions/", 14) == 0) {
        path = ref[2] == '$' ? ref + 8 : ref + 14;
        target = get(get(c->root, ref[2] == '$' ? "$defs" : "definitions"), path);
    } else {
        return jfail(c, "$ref '%s' is not supported (only #, #/$defs/... and "
                     "#/definitions/...)", ref);
    }
    if (target == NULL) {
        return jfail(c, "$ref '%s' does not resolve", ref);
    }
    if (c->n_defs == MAX_DEFS) {
        return jfail(c, "too many $ref targets");
    }
    c->defs[c->n_defs].ref = strdup(ref);
    if (c->defs[c->n_defs].ref == NULL) {
        return jfail(c, "out of memory");
    }
    new_rule_name(c, c->defs[c->n_defs].name, sizeof(c->defs[0].name));
    i = c->n_defs++;
    if (js_schema(c, target, &b) != 0) {
        free(b.p);
        return -1;
    }
    add_rule(c, c->defs[i].name, &b);
    free(b.p);
    sb_puts(o, c->defs[i].name);
    return 0;
}


static int
js_typed(js *c, yajl_val s, const char *type, sbuf *o)
{
    if (strcmp(type, "string") == 0) {
        return js_string(c, s, o);
    }
    if (strcmp(type, "integer") == 0) {
        return js_integer(c, s, o);
    }
    if (strcmp(type, "number") == 0) {
        if (get(s, "minimum") || get(s, "maximum") || get(s, "exclusiveMinimum")
            || get(s, "exclusiveMaximum"))
        {
            return jfail(c, "'minimum'/'maximum' on type number are not supported "
                         "(on integer they are)");
        }
        sb_puts(o, "basic_number");
        return 0;
    }
    if (strcmp(type, "boolean") == 0) {
        sb_puts(o, "basic_boolean");
        return 0;
    }
    if (strcmp(type, "null") == 0) {
        sb_puts(o, "basic_null");
        return 0;
    }
    if (strcmp(type, "object") == 0) {
        return js_object(c, s, o);
    }
    if (strcmp(type, "array") == 0) {
        return js_array(c, s, o);
    }
    return jfail(c, "unknown type '%s'", type);
}


static int
js_alternatives(js *c, yajl_val list, const char *kw, sbuf *o)
{
    size_t i;

    if (!YAJL_IS_ARRAY(list) || list->u.array.len == 0) {
        return jfail(c, "'%s' must be a non-empty array", kw);
    }
    sb_putc(o, '(');
    for (i = 0; i < list->u.array.len; i++) {
        if (i) {
            sb_puts(o, " | ");
        }
        if (js_schema(c, list->u.array.values[i], o) != 0) {
            return -1;
        }
    }
    sb_putc(o, ')');
    return 0;
}


static int
js_schema_inner(js *c, yajl_val s, sbuf *o)
{
    yajl_val  type, v;
    size_t    i;
    int       k;

    if (YAJL_IS_TRUE(s)) {
        sb_puts(o, "basic_any");
        return 0;
    }
    if (YAJL_IS_FALSE(s)) {
        return jfail(c, "a 'false' schema allows no value");
    }
    if (!YAJL_IS_OBJECT(s)) {
        return jfail(c, "a schema must be an object or a boolean");
    }
    for (k = 0; unsupported_kw[k]; k++) {
        if (get(s, unsupported_kw[k])) {
            return jfail(c, "keyword '%s' is not supported", unsupported_kw[k]);
        }
    }
    if ((v = get(s, "$ref")) != NULL) {
        if (!YAJL_IS_STRING(v)) {
            return jfail(c, "'$ref' must be a string");
        }
        return js_ref(c, v->u.string, o);
    }
    if ((v = get(s, "allOf")) != NULL) {
        if (!YAJL_IS_ARRAY(v) || v->u.array.len != 1) {
            return jfail(c, "'allOf' with more than one schema is not supported");
        }
        return js_schema(c, v->u.array.values[0], o);
    }
    if ((v = get(s, "anyOf")) != NULL) {
        return js_alternatives(c, v, "anyOf", o);
    }
    if ((v = get(s, "oneOf")) != NULL) {
        /* the branches of a generated value are taken as exclusive, as xgrammar does */
        return js_alternatives(c, v, "oneOf", o);
    }
    if ((v = get(s, "const")) != NULL) {
        sbuf j = { NULL, 0, 0, 0 };
        json_serialize(&j, v);
        put_literal(o, j.p, j.len);
        free(j.p);
        return 0;
    }
    if ((v = get(s, "enum")) != NULL) {
        if (!YAJL_IS_ARRAY(v) || v->u.array.len == 0) {
            return jfail(c, "'enum' must be a non-empty array");
        }
        sb_putc(o, '(');
        for (i = 0; i < v->u.array.len; i++) {
            sbuf j = { NULL, 0, 0, 0 };
            json_serialize(&j, v->u.array.values[i]);
            if (i) {
                sb_puts(o, " | ");
            }
            put_literal(o, j.p, j.len);
            free(j.p);
        }
        sb_putc(o, ')');
        return 0;
    }
    type = get(s, "type");
    if (type == NULL) {
        if (get(s, "properties") || get(s, "required") || get(s, "additionalProperties")) {
            return js_object(c, s, o);
        }
        if (get(s, "items") || get(s, "prefixItems")) {
            return js_array(c, s, o);
        }
        sb_puts(o, "basic_any");
        return 0;
    }
    if (YAJL_IS_STRING(type)) {
        return js_typed(c, s, type->u.string, o);
    }
    if (YAJL_IS_ARRAY(type) && type->u.array.len > 0) {
        sb_putc(o, '(');
        for (i = 0; i < type->u.array.len; i++) {
            if (!YAJL_IS_STRING(type->u.array.values[i])) {
                return jfail(c, "'type' must be a string or an array of strings");
            }
            if (i) {
                sb_puts(o, " | ");
            }
            if (js_typed(c, s, type->u.array.values[i]->u.string, o) != 0) {
                return -1;
            }
        }
        sb_putc(o, ')');
        return 0;
    }
    return jfail(c, "'type' must be a string or an array of strings");
}


static int
js_schema(js *c, yajl_val s, sbuf *o)
{
    yajl_val n;
    int      rc;

    if (++c->depth > MAX_DEPTH) {
        return jfail(c, "nested deeper than %d", MAX_DEPTH);
    }
    n = get(s, "nullable");
    if (n && YAJL_IS_TRUE(n)) {
        sb_putc(o, '(');
        rc = js_schema_inner(c, s, o);
        sb_puts(o, " | basic_null)");
    } else {
        rc = js_schema_inner(c, s, o);
    }
    c->depth--;
    return rc;
}


int
srt_grammar_json_schema_to_gbnf(const char *schema, size_t len, const srt_grammar_json_opts *opts,
                                char **gbnf, srt_err *err)
{
    js       *c;
    char      yerr[256], *text;
    sbuf      out = { NULL, 0, 0, 0 }, root = { NULL, 0, 0, 0 };
    int       i, rc = SRT_ERROR, max_ws;

    *gbnf = NULL;
    c = calloc(1, sizeof(*c));
    text = malloc(len + 1);
    if (c == NULL || text == NULL) {
        free(c);
        free(text);
        srt_err_set(err, "json_schema: out of memory");
        return SRT_ERROR;
    }
    memcpy(text, schema, len);
    text[len] = '\0';
    yerr[0] = '\0';
    c->root = yajl_tree_parse(text, yerr, sizeof(yerr));
    free(text);
    if (c->root == NULL) {
        char *nl = strchr(yerr, '\n');
        if (nl) *nl = '\0';
        srt_err_set(err, "json_schema: invalid JSON: %s", yerr[0] ? yerr : "parse error");
        free(c);
        return SRT_ERROR;
    }
    c->err = err;
    max_ws = opts && opts->max_ws ? opts->max_ws : 16;
    c->max_ws = max_ws < 0 ? 0 : max_ws;
    c->allow_add = opts ? opts->allow_additional : 0;
    snprintf(c->ws, sizeof(c->ws), "ws");

    if (js_schema(c, c->root, &root) != 0) {
        goto done;
    }
    sb_puts(&out, "root ::= ");
    sb_put(&out, root.p, root.len);
    sb_putc(&out, '\n');
    if (c->max_ws) {
        sb_printf(&out, "ws ::= [ \\n\\r\\t]{0,%d}\n", c->max_ws);
    } else {
        sb_puts(&out, "ws ::= \"\"\n");
    }
    sb_puts(&out, basic_rules);
    if (c->rules.p) {
        sb_put(&out, c->rules.p, c->rules.len);
    }
    if (out.oom || c->rules.oom || root.oom) {
        srt_err_set(err, "json_schema: out of memory");
        goto done;
    }
    *gbnf = out.p;
    out.p = NULL;
    rc = SRT_OK;

done:
    for (i = 0; i < c->n_defs; i++) {
        free(c->defs[i].ref);
    }
    free(out.p);
    free(root.p);
    free(c->rules.p);
    yajl_tree_free(c->root);
    free(c);
    return rc;
}
