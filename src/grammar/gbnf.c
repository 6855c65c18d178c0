/*
 * GBNF / EBNF text -> syntax tree.
 *
 * The syntax is llama.cpp's GBNF, which also covers the EBNF xgrammar and SGLang's `ebnf` take:
 *   name ::= alternatives          one rule; `root` is where matching starts
 *   a b | c                        sequence, alternation
 *   "lit" 'lit' [a-z] [^"\\] .     literals, classes of code points, any code point
 *   ( ... )  x* x+ x? x{m} x{m,} x{m,n}
 *   # comment to the end of the line
 * Escapes: \n \r \t \\ \" \' \[ \] \- \/ \xHH \uHHHH \UHHHHHHHH. A rule ends where the next
 * `name ::=` starts, so rules may span lines. Errors give the byte offset.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

#define MAX_CODEPOINT 0x10FFFF
#define MAX_REPEAT    10000
#define MAX_DEPTH     200


ast *
ast_new(ast_kind kind)
{
    ast *a = calloc(1, sizeof(*a));

    if (a) {
        a->kind = kind;
        a->ref = -1;
    }
    return a;
}


int
ast_add(ast *parent, ast *kid)
{
    ast **k;

    if (kid == NULL) {
        return -1;
    }
    if (parent->n_kids == parent->cap_kids) {
        int cap = parent->cap_kids ? parent->cap_kids * 2 : 4;
        k = realloc(parent->kids, cap * sizeof(*k));
        if (k == NULL) {
            ast_free(kid);
            return -1;
        }
        parent->kids = k;
        parent->cap_kids = cap;
    }
    parent->kids[parent->n_kids++] = kid;
    return 0;
}


void
ast_free(ast *a)
{
    int i;

    if (a == NULL) {
        return;
    }
    for (i = 0; i < a->n_kids; i++) {
        ast_free(a->kids[i]);
    }
    free(a->kids);
    free(a->str);
    free(a->ranges);
    free(a);
}


void
ast_grammar_free(ast_grammar *g)
{
    int i;

    for (i = 0; i < g->n_rules; i++) {
        free(g->rules[i].name);
        ast_free(g->rules[i].body);
    }
    free(g->rules);
    memset(g, 0, sizeof(*g));
}


int
ast_rule_id(ast_grammar *g, const char *name, size_t len, size_t where)
{
    int        i;
    ast_rule  *r;

    for (i = 0; i < g->n_rules; i++) {
        if (strlen(g->rules[i].name) == len && memcmp(g->rules[i].name, name, len) == 0) {
            return i;
        }
    }
    if (g->n_rules == g->cap_rules) {
        int cap = g->cap_rules ? g->cap_rules * 2 : 16;
        r = realloc(g->rules, cap * sizeof(*r));
        if (r == NULL) {
            return -1;
        }
        g->rules = r;
        g->cap_rules = cap;
    }
    r = &g->rules[g->n_rules];
    memset(r, 0, sizeof(*r));
    r->name = strndup(name, len);
    if (r->name == NULL) {
        return -1;
    }
    r->where = where;
    return g->n_rules++;
}


/* ---- the parser ---- */

typedef struct {
    const char   *s;
    size_t        len, pos;
    ast_grammar  *g;
    srt_err      *err;
    int           depth;
    int           failed;
} parser;


static int
fail(parser *p, const char *fmt, ...)
{
    char     msg[512];
    va_list  ap;

    if (!p->failed) {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        srt_err_set(p->err, "grammar: %s at byte %zu", msg, p->pos);
        p->failed = 1;
    }
    return -1;
}


static int
is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
           || c == '_' || c == '-' || c == '.';
}


static void
skip_space(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n') {
                p->pos++;
            }
        } else {
            break;
        }
    }
}


/* A rule starts here: name, spaces, "::=". */
static int
at_rule_start(parser *p, size_t *name_end)
{
    size_t i = p->pos;

    while (i < p->len && is_name_char((unsigned char) p->s[i]) && p->s[i] != '.') {
        i++;
    }
    if (i == p->pos) {
        return 0;
    }
    *name_end = i;
    while (i < p->len && (p->s[i] == ' ' || p->s[i] == '\t' || p->s[i] == '\n'
                          || p->s[i] == '\r'))
    {
        i++;
    }
    return p->len - i >= 3 && memcmp(p->s + i, "::=", 3) == 0;
}


/* One UTF-8 code point of the grammar text. */
static int
read_utf8(parser *p, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *) p->s + p->pos;
    size_t               left = p->len - p->pos, n, i;
    uint32_t             c;

    if (s[0] < 0x80) {
        *cp = s[0];
        p->pos++;
        return 0;
    }
    if ((s[0] & 0xE0) == 0xC0) {
        n = 2; c = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        n = 3; c = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        n = 4; c = s[0] & 0x07;
    } else {
        return fail(p, "invalid UTF-8");
    }
    if (left < n) {
        return fail(p, "invalid UTF-8");
    }
    for (i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return fail(p, "invalid UTF-8");
        }
        c = (c << 6) | (s[i] & 0x3F);
    }
    p->pos += n;
    *cp = c;
    return 0;
}


static int
hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}


/* A character of a literal or class, escapes resolved. */
static int
read_char(parser *p, uint32_t *cp)
{
    int       n, i, h;
    uint32_t  c;

    if (p->pos >= p->len) {
        return fail(p, "unexpected end of grammar");
    }
    if (p->s[p->pos] != '\\') {
        return read_utf8(p, cp);
    }
    p->pos++;
    if (p->pos >= p->len) {
        return fail(p, "unexpected end of grammar after '\\'");
    }
    c = (unsigned char) p->s[p->pos++];
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': n = 2; break;
    case 'u': n = 4; break;
    case 'U': n = 8; break;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^':
    case '.': case '(': case ')': case '|': case '*': case '+': case '?': case '{': case '}':
    case '$': case ' ':
        *cp = c;
        return 0;
    default:
        p->pos--;
        return fail(p, "unknown escape '\\%c'", (int) c);
    }
    c = 0;
    for (i = 0; i < n; i++) {
        h = p->pos < p->len ? hexval((unsigned char) p->s[p->pos]) : -1;
        if (h < 0) {
            return fail(p, "bad hex escape");
        }
        c = c * 16 + (uint32_t) h;
        p->pos++;
    }
    if (c > MAX_CODEPOINT) {
        return fail(p, "code point U+%X is out of range", c);
    }
    *cp = c;
    return 0;
}


static size_t
utf8_put(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char) c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char) (0xC0 | (c >> 6));
        out[1] = (char) (0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char) (0xE0 | (c >> 12));
        out[1] = (char) (0x80 | ((c >> 6) & 0x3F));
        out[2] = (char) (0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char) (0xF0 | (c >> 18));
    out[1] = (char) (0x80 | ((c >> 12) & 0x3F));
    out[2] = (char) (0x80 | ((c >> 6) & 0x3F));
    out[3] = (char) (0x80 | (c & 0x3F));
    return 4;
}


static ast *
parse_literal(parser *p, char quote)
{
    ast      *a;
    char     *buf;
    size_t    n = 0, cap = 64;
    uint32_t  c;

    buf = malloc(cap);
    if (buf == NULL) {
        return NULL;
    }
    p->pos++;                               /* the opening quote */
    for ( ;; ) {
        if (p->pos >= p->len) {
            free(buf);
            fail(p, "unterminated string literal");
            return NULL;
        }
        if (p->s[p->pos] == quote) {
            p->pos++;
            break;
        }
        if (read_char(p, &c) != 0) {
            free(buf);
            return NULL;
        }
        if (n + 4 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (nb == NULL) {
                free(buf);
                return NULL;
            }
            buf = nb;
        }
        n += utf8_put(c, buf + n);
    }
    a = ast_new(n ? AST_BYTES : AST_EMPTY);
    if (a == NULL || n == 0) {
        free(buf);
        return a;
    }
    a->str = buf;
    a->len = n;
    return a;
}


static int
cmp_u32_pair(const void *x, const void *y)
{
    const uint32_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}


/* Sorts and merges [lo, hi] pairs; complements them over all code points when negate. */
int
ranges_normalize(uint32_t **ranges, int *n, int negate)
{
    uint32_t  *r = *ranges, *o;
    int        i, k = 0;
    uint32_t   next;

    qsort(r, *n, 2 * sizeof(uint32_t), cmp_u32_pair);
    for (i = 0; i < *n; i++) {
        if (k && r[2 * i] <= r[2 * (k - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (k - 1) + 1]) {
                r[2 * (k - 1) + 1] = r[2 * i + 1];
            }
        } else {
            r[2 * k] = r[2 * i];
            r[2 * k + 1] = r[2 * i + 1];
            k++;
        }
    }
    *n = k;
    if (!negate) {
        return 0;
    }
    o = malloc((k + 1) * 2 * sizeof(uint32_t));
    if (o == NULL) {
        return -1;
    }
    next = 0;
    *n = 0;
    for (i = 0; i < k; i++) {
        if (r[2 * i] > next) {
            o[2 * *n] = next;
            o[2 * *n + 1] = r[2 * i] - 1;
            (*n)++;
        }
        next = r[2 * i + 1] + 1;
    }
    if (next <= MAX_CODEPOINT) {
        o[2 * *n] = next;
        o[2 * *n + 1] = MAX_CODEPOINT;
        (*n)++;
    }
    free(r);
    *ranges = o;
    return 0;
}


static ast *
parse_class(parser *p)
{
    ast       *a;
    int        negate = 0, n = 0, cap = 8;
    uint32_t  *r, lo, hi;

    p->pos++;                               /* [ */
    if (p->pos < p->len && p->s[p->pos] == '^') {
        negate = 1;
        p->pos++;
    }
    r = malloc(cap * 2 * sizeof(uint32_t));
    if (r == NULL) {
        return NULL;
    }
    for ( ;; ) {
        if (p->pos >= p->len) {
            free(r);
            fail(p, "unterminated character class");
            return NULL;
        }
        if (p->s[p->pos] == ']') {
            p->pos++;
            break;
        }
        if (read_char(p, &lo) != 0) {
            free(r);
            return NULL;
        }
        hi = lo;
        if (p->pos + 1 < p->len && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
            p->pos++;
            if (read_char(p, &hi) != 0) {
                free(r);
                return NULL;
            }
            if (hi < lo) {
                free(r);
                fail(p, "character class range out of order");
                return NULL;
            }
        }
        if (n == cap) {
            uint32_t *nr = realloc(r, (cap *= 2) * 2 * sizeof(uint32_t));
            if (nr == NULL) {
                free(r);
                return NULL;
            }
            r = nr;
        }
        r[2 * n] = lo;
        r[2 * n + 1] = hi;
        n++;
    }
    if (ranges_normalize(&r, &n, negate) != 0) {
        free(r);
        return NULL;
    }
    a = ast_new(AST_CLASS);
    if (a == NULL) {
        free(r);
        return NULL;
    }
    a->ranges = r;
    a->n_ranges = n;
    return a;
}


static ast *parse_alternatives(parser *p, int nested);


static int
read_int(parser *p, int *out)
{
    long v = 0;
    size_t start = p->pos;

    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        v = v * 10 + (p->s[p->pos] - '0');
        if (v > MAX_REPEAT) {
            return fail(p, "repetition count over %d", MAX_REPEAT);
        }
        p->pos++;
    }
    if (p->pos == start) {
        return fail(p, "expected a number");
    }
    *out = (int) v;
    return 0;
}


static ast *
parse_item(parser *p)
{
    ast     *a, *r;
    size_t   start, end;
    int      id;

    if (p->s[p->pos] == '"' || p->s[p->pos] == '\'') {
        a = parse_literal(p, p->s[p->pos]);

    } else if (p->s[p->pos] == '[') {
        a = parse_class(p);

    } else if (p->s[p->pos] == '.') {
        p->pos++;
        a = ast_new(AST_CLASS);
        if (a) {
            a->ranges = malloc(2 * sizeof(uint32_t));
            if (a->ranges == NULL) {
                ast_free(a);
                return NULL;
            }
            a->ranges[0] = 0;
            a->ranges[1] = MAX_CODEPOINT;
            a->n_ranges = 1;
        }

    } else if (p->s[p->pos] == '(') {
        p->pos++;
        if (++p->depth > MAX_DEPTH) {
            fail(p, "groups nested deeper than %d", MAX_DEPTH);
            return NULL;
        }
        a = parse_alternatives(p, 1);
        p->depth--;
        if (a == NULL) {
            return NULL;
        }
        skip_space(p);
        if (p->pos >= p->len || p->s[p->pos] != ')') {
            ast_free(a);
            fail(p, "expected ')'");
            return NULL;
        }
        p->pos++;

    } else if (is_name_char((unsigned char) p->s[p->pos]) && p->s[p->pos] != '.') {
        start = p->pos;
        while (p->pos < p->len && is_name_char((unsigned char) p->s[p->pos])
               && p->s[p->pos] != '.')
        {
            p->pos++;
        }
        end = p->pos;
        id = ast_rule_id(p->g, p->s + start, end - start, start);
        if (id < 0) {
            return NULL;
        }
        a = ast_new(AST_REF);
        if (a) {
            a->ref = id;
        }

    } else {
        fail(p, "unexpected '%c'", p->s[p->pos]);
        return NULL;
    }

    if (a == NULL) {
        return NULL;
    }

    /* postfix operators */
    while (p->pos < p->len) {
        int min, max;
        char c = p->s[p->pos];

        if (c == '*') {
            min = 0; max = -1; p->pos++;
        } else if (c == '+') {
            min = 1; max = -1; p->pos++;
        } else if (c == '?') {
            min = 0; max = 1; p->pos++;
        } else if (c == '{') {
            p->pos++;
            skip_space(p);
            if (read_int(p, &min) != 0) {
                ast_free(a);
                return NULL;
            }
            skip_space(p);
            max = min;
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                skip_space(p);
                max = -1;
                if (p->pos < p->len && p->s[p->pos] != '}') {
                    if (read_int(p, &max) != 0) {
                        ast_free(a);
                        return NULL;
                    }
                    if (max < min) {
                        ast_free(a);
                        fail(p, "repetition {%d,%d}: max below min", min, max);
                        return NULL;
                    }
                }
                skip_space(p);
            }
            if (p->pos >= p->len || p->s[p->pos] != '}') {
                ast_free(a);
                fail(p, "expected '}'");
                return NULL;
            }
            p->pos++;
        } else {
            break;
        }
        r = ast_new(AST_REPEAT);
        if (r == NULL || ast_add(r, a) != 0) {
            ast_free(r);
            return NULL;
        }
        r->min = min;
        r->max = max;
        a = r;
    }
    return a;
}


static ast *
parse_sequence(parser *p, int nested)
{
    ast    *seq, *it;
    size_t  ne;

    seq = ast_new(AST_SEQ);
    if (seq == NULL) {
        return NULL;
    }
    for ( ;; ) {
        skip_space(p);
        if (p->pos >= p->len || p->s[p->pos] == '|' || p->s[p->pos] == ')') {
            break;
        }
        if (!nested && at_rule_start(p, &ne)) {
            break;
        }
        it = parse_item(p);
        if (it == NULL || ast_add(seq, it) != 0) {
            ast_free(seq);
            return NULL;
        }
    }
    return seq;
}


static ast *
parse_alternatives(parser *p, int nested)
{
    ast *alt, *seq;

    alt = ast_new(AST_ALT);
    if (alt == NULL) {
        return NULL;
    }
    for ( ;; ) {
        seq = parse_sequence(p, nested);
        if (seq == NULL || ast_add(alt, seq) != 0) {
            ast_free(alt);
            return NULL;
        }
        if (p->pos < p->len && p->s[p->pos] == '|') {
            p->pos++;
            continue;
        }
        break;
    }
    if (!nested && p->pos < p->len && p->s[p->pos] == ')') {
        ast_free(alt);
        fail(p, "unbalanced ')'");
        return NULL;
    }
    return alt;
}


int
gbnf_parse(const char *text, size_t len, ast_grammar *g, srt_err *err)
{
    parser  p;
    size_t  ne, start;
    int     id, i;
    ast    *body;

    memset(g, 0, sizeof(*g));
    g->root = -1;
    memset(&p, 0, sizeof(p));
    p.s = text;
    p.len = len;
    p.g = g;
    p.err = err;

    for ( ;; ) {
        skip_space(&p);
        if (p.pos >= p.len) {
            break;
        }
        start = p.pos;
        if (!at_rule_start(&p, &ne)) {
            fail(&p, "expected a rule (name ::= ...)");
            goto failed;
        }
        id = ast_rule_id(g, text + start, ne - start, start);
        if (id < 0) {
            srt_err_set(err, "grammar: out of memory");
            goto failed;
        }
        if (g->rules[id].body) {
            fail(&p, "rule '%s' is defined twice", g->rules[id].name);
            goto failed;
        }
        p.pos = ne;
        skip_space(&p);
        p.pos += 3;                                 /* ::= */
        body = parse_alternatives(&p, 0);
        if (body == NULL) {
            if (!p.failed) {
                srt_err_set(err, "grammar: out of memory");
            }
            goto failed;
        }
        g->rules[id].body = body;
        g->rules[id].where = start;
    }

    for (i = 0; i < g->n_rules; i++) {
        if (g->rules[i].body == NULL) {
            srt_err_set(err, "grammar: rule '%s' is used at byte %zu but never defined",
                        g->rules[i].name, g->rules[i].where);
            goto failed;
        }
        if (strcmp(g->rules[i].name, "root") == 0) {
            g->root = i;
        }
    }
    if (g->root < 0) {
        srt_err_set(err, "grammar: no 'root' rule");
        goto failed;
    }
    return 0;

failed:
    ast_grammar_free(g);
    return -1;
}
