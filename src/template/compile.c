/* Template source -> syntax tree. The lexer reproduces jinja2's whitespace handling under transformers'
 * settings (trim_blocks, lstrip_blocks, '-'/'+' markers, the dropped final newline); the parser follows
 * jinja2's grammar and precedence. Anything the renderer cannot do is refused here, naming the construct
 * and its line, so a model with an unsupported template fails at load time, never per request. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srt/chat_template.h"
#include "template/tpl.h"

enum { T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT,
       T_OP };

typedef struct tok {
    uint8_t     type;
    int         line;
    const char *p;   /* text of names, operators, data; decoded value of strings */
    size_t      n;
    int64_t     i;
    double      f;
} tok;

typedef struct parser {
    tpl_arena  *a;
    srt_err    *err;
    jmp_buf     jb;
    const char *src;
    size_t      len;
    tok        *toks;
    size_t      ntok, cap, pos;
    int         loop_depth;
    int         macro_depth;
    int         depth;      /* expression nesting, bounded so hostile templates cannot exhaust the stack */
    expr      **calls;      /* E_CALL nodes to check against macro names when parsing ends */
    size_t      ncalls, calls_cap;
    name_ref   *macros;
    size_t      nmacros, macros_cap;
} parser;

static void fail(parser *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
static void fail(parser *p, int line, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    srt_err_set(p->err, "chat template line %d: %s", line, msg);
    longjmp(p->jb, 1);
}

static void *palloc(parser *p, size_t n)
{
    void *x = tpl_arena_alloc(p->a, n);
    if (!x)
        fail(p, 0, "out of memory");
    memset(x, 0, n);
    return x;
}

static void grow(parser *p, void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return;
    size_t nc = *cap ? *cap * 2 : 64;
    void *na = realloc(*arr, nc * elem);
    if (!na)
        fail(p, 0, "out of memory");
    *arr = na;
    *cap = nc;
}

static tok *push_tok(parser *p, int type, int line)
{
    grow(p, (void **)&p->toks, &p->cap, p->ntok, sizeof(tok));
    tok *t = &p->toks[p->ntok++];
    memset(t, 0, sizeof(*t));
    t->type = (uint8_t)type;
    t->line = line;
    return t;
}

/* ------------------------------------------------------------------------------------------------ lexer */

static int count_lines(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

static bool all_space(const char *s, size_t n)
{
    if (n == 0)
        return false;
    size_t i = 0;
    while (i < n) {
        size_t k = tpl_u8_space_at(s + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

/* Text before a tag: '-' strips all trailing whitespace; lstrip_blocks strips the indentation of a
 * block or comment tag that starts its line. */
static size_t strip_before_tag(const char *s, size_t n, char sign, bool is_var, bool line_starting)
{
    if (sign == '-') {
        size_t k;
        while ((k = tpl_u8_space_before(s, n)) != 0)
            n -= k;
        return n;
    }
    if (sign == '+' || is_var)
        return n;
    size_t l_pos = n;
    while (l_pos > 0 && s[l_pos - 1] != '\n')
        l_pos--;
    if ((l_pos > 0 || line_starting) && all_space(s + l_pos, n - l_pos))
        return l_pos;
    return n;
}

static size_t skip_space(const char *s, size_t len, size_t i)
{
    size_t k;
    while (i < len && (k = tpl_u8_space_at(s + i, len - i)) != 0)
        i += k;
    return i;
}

static bool is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9');
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static void put_utf8(sbuf *b, uint32_t cp)
{
    char u[4];
    if (cp < 0x80) {
        tpl_sb_putc(b, (char)cp);
        return;
    }
    if (cp < 0x800) {
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

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A string literal, unescaped as Python's "unicode-escape" codec does (what jinja2's lexer applies). */
static size_t lex_string(parser *p, size_t i, int line, tok *t)
{
    char q = p->src[i++];
    size_t start = i;
    while (i < p->len && p->src[i] != q) {
        if (p->src[i] == '\\')
            i++;
        i++;
    }
    if (i >= p->len)
        fail(p, line, "unterminated string literal");
    const char *s = p->src + start;
    size_t n = i - start;
    sbuf b;
    tpl_sb_init(&b, p->a, n + 1);
    for (size_t j = 0; j < n; j++) {
        if (s[j] != '\\' || j + 1 >= n) {
            tpl_sb_putc(&b, s[j]);
            continue;
        }
        char c = s[++j];
        int digits = 0;
        switch (c) {
        case '\n': break;
        case '\\': tpl_sb_putc(&b, '\\'); break;
        case '\'': tpl_sb_putc(&b, '\''); break;
        case '"': tpl_sb_putc(&b, '"'); break;
        case 'a': tpl_sb_putc(&b, '\a'); break;
        case 'b': tpl_sb_putc(&b, '\b'); break;
        case 'f': tpl_sb_putc(&b, '\f'); break;
        case 'n': tpl_sb_putc(&b, '\n'); break;
        case 'r': tpl_sb_putc(&b, '\r'); break;
        case 't': tpl_sb_putc(&b, '\t'); break;
        case 'v': tpl_sb_putc(&b, '\v'); break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': fail(p, line, "unsupported construct: \\N{...} escape in a string literal");
        default:
            if (c >= '0' && c <= '7') {
                uint32_t cp = 0;
                int k = 0;
                while (k < 3 && j < n && s[j] >= '0' && s[j] <= '7') {
                    cp = cp * 8 + (uint32_t)(s[j] - '0');
                    j++;
                    k++;
                }
                j--;
                put_utf8(&b, cp);
            } else {
                tpl_sb_putc(&b, '\\');
                tpl_sb_putc(&b, c);
            }
        }
        if (digits) {
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = j + 1 + (size_t)k < n ? hexval(s[j + 1 + k]) : -1;
                if (h < 0)
                    fail(p, line, "truncated \\%c escape in string literal", c);
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF)
                fail(p, line, "invalid \\%c escape in string literal", c);
            j += (size_t)digits;
            put_utf8(&b, cp);
        }
    }
    if (b.oom)
        fail(p, line, "out of memory");
    t->type = T_STRING;
    t->p = b.p;
    t->n = b.n;
    return i + 1;
}

static size_t lex_number(parser *p, size_t i, int line, tok *t)
{
    char buf[64];
    /* 0x.., 0o.., 0b.. */
    if (p->src[i] == '0' && i + 2 < p->len && strchr("xXoObB", p->src[i + 1]) && p->src[i + 1]) {
        char kind = (char)(p->src[i + 1] | 32);
        int base = kind == 'x' ? 16 : kind == 'o' ? 8 : 2;
        size_t j = i + 2, k = 0;
        while (j < p->len && (hexval(p->src[j]) >= 0 || p->src[j] == '_')) {
            if (p->src[j] != '_') {
                if (hexval(p->src[j]) >= base)
                    fail(p, line, "invalid digit '%c' in a base-%d literal", p->src[j], base);
                if (k >= 60)
                    fail(p, line, "number literal too long");
                buf[k++] = p->src[j];
            }
            j++;
        }
        if (k > 0) {
            buf[k] = '\0';
            char *end;
            errno = 0;
            unsigned long long v = strtoull(buf, &end, base);
            if (errno || v > (unsigned long long)INT64_MAX)
                fail(p, line, "integer literal too large");
            t->type = T_INT;
            t->i = (int64_t)v;
            return j;
        }
    }
    size_t k = 0;
    bool is_float = false;
    while (i < p->len && (is_digit(p->src[i]) || p->src[i] == '_')) {
        if (p->src[i] != '_' && k < sizeof(buf) - 1)
            buf[k++] = p->src[i];
        i++;
    }
    if (i + 1 < p->len && p->src[i] == '.' && is_digit(p->src[i + 1])) {
        is_float = true;
        buf[k++] = '.';
        i++;
        while (i < p->len && (is_digit(p->src[i]) || p->src[i] == '_')) {
            if (p->src[i] != '_' && k < sizeof(buf) - 1)
                buf[k++] = p->src[i];
            i++;
        }
    }
    if (i < p->len && (p->src[i] == 'e' || p->src[i] == 'E')) {
        size_t j = i + 1;
        if (j < p->len && (p->src[j] == '+' || p->src[j] == '-'))
            j++;
        if (j < p->len && is_digit(p->src[j])) {
            is_float = true;
            if (k < sizeof(buf) - 1)
                buf[k++] = 'e';
            for (size_t m = i + 1; m < j; m++)
                if (k < sizeof(buf) - 1)
                    buf[k++] = p->src[m];
            i = j;
            while (i < p->len && is_digit(p->src[i]))
                if (k < sizeof(buf) - 1)
                    buf[k++] = p->src[i++];
                else
                    i++;
        }
    }
    if (k >= sizeof(buf) - 1)
        fail(p, line, "number literal too long");
    buf[k] = '\0';
    if (is_float) {
        t->type = T_FLOAT;
        t->f = strtod(buf, NULL);
    } else {
        t->type = T_INT;
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (k > 18 && (v > (unsigned long long)INT64_MAX || k > 19)) {
            /* beyond int64: kept as decimal text, as Python keeps any integer */
            t->type = T_FLOAT;
            t->p = tpl_arena_memdup(p->a, buf, k);
            t->n = k;
            t->i = 1;
            if (!t->p)
                fail(p, line, "out of memory");
            return i;
        }
        t->i = (int64_t)v;
    }
    return i;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char OPS1[] = "+-/*%~[](){}<>=.:|,;";

/* Tokens of one {{ }} or {% %} tag, up to and including its end marker. */
static size_t lex_tag(parser *p, size_t i, int *line, bool is_var, bool *line_starting)
{
    const char *s = p->src;
    for (;;) {
        while (i < p->len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' ||
                              s[i] == '\v')) {
            if (s[i] == '\n')
                (*line)++;
            i++;
        }
        if (i >= p->len)
            fail(p, *line, "unexpected end of template: missing '%s'", is_var ? "}}" : "%}");
        char close = is_var ? '}' : '%';
        size_t end_start = i;
        bool strip = false, plus = false, is_end = false;
        if (s[i] == '-' && i + 2 < p->len && s[i + 1] == close && s[i + 2] == '}') {
            strip = true;
            is_end = true;
            i += 3;
        } else if (!is_var && s[i] == '+' && i + 2 < p->len && s[i + 1] == '%' && s[i + 2] == '}') {
            plus = true;
            is_end = true;
            i += 3;
        } else if (s[i] == close && i + 1 < p->len && s[i + 1] == '}') {
            is_end = true;
            i += 2;
        }
        if (is_end) {
            push_tok(p, is_var ? T_VAR_END : T_BLOCK_END, *line);
            size_t after = i;
            if (strip)
                after = skip_space(s, p->len, i);
            else if (!is_var && !plus && i < p->len && s[i] == '\n')
                after = i + 1;
            *line += count_lines(s + i, after - i);
            *line_starting = after > end_start && s[after - 1] == '\n';
            return after;
        }
        tok t = {0};
        t.line = *line;
        char c = s[i];
        if (is_name_start(c)) {
            size_t st = i;
            while (i < p->len && is_name_char(s[i]))
                i++;
            t.type = T_NAME;
            t.p = s + st;
            t.n = i - st;
        } else if (is_digit(c)) {
            i = lex_number(p, i, *line, &t);
        } else if (c == '\'' || c == '"') {
            int l0 = *line;
            size_t st = i;
            i = lex_string(p, i, *line, &t);
            *line = l0 + count_lines(s + st, i - st);
        } else {
            t.type = T_OP;
            t.p = s + i;
            t.n = 0;
            for (int k = 0; OPS2[k]; k++)
                if (i + 1 < p->len && s[i] == OPS2[k][0] && s[i + 1] == OPS2[k][1])
                    t.n = 2;
            if (!t.n && strchr(OPS1, c) && c)
                t.n = 1;
            if (!t.n)
                fail(p, *line, "unexpected character '%c' in tag", c);
            i += t.n;
        }
        *push_tok(p, t.type, t.line) = t;
    }
}

/* {% raw %} at i (after "{%" and its sign)? Returns the index after the whole opening tag, or 0. */
static size_t raw_open(parser *p, size_t i, char *end_sign)
{
    const char *s = p->src;
    i = skip_space(s, p->len, i);
    if (i + 3 > p->len || memcmp(s + i, "raw", 3) != 0 || (i + 3 < p->len && is_name_char(s[i + 3])))
        return 0;
    i = skip_space(s, p->len, i + 3);
    *end_sign = 0;
    if (i < p->len && (s[i] == '-' || s[i] == '+'))
        *end_sign = s[i++];
    if (i + 2 <= p->len && s[i] == '%' && s[i + 1] == '}')
        return i + 2;
    return 0;
}

/* jinja2 rewrites \r\n and \r to \n in the whole source before lexing. */
static void normalize_newlines(parser *p, const char **text, size_t *n)
{
    if (!memchr(*text, '\r', *n))
        return;
    char *o = palloc(p, *n + 1);
    size_t k = 0;
    for (size_t i = 0; i < *n; i++) {
        if ((*text)[i] == '\r') {
            o[k++] = '\n';
            if (i + 1 < *n && (*text)[i + 1] == '\n')
                i++;
        } else {
            o[k++] = (*text)[i];
        }
    }
    *text = o;
    *n = k;
}

static tok *push_data(parser *p, int line, const char *text, size_t n)
{
    tok *t = push_tok(p, T_DATA, line);
    t->p = text;
    t->n = n;
    return t;
}

static void lex(parser *p)
{
    normalize_newlines(p, &p->src, &p->len);
    const char *s = p->src;
    size_t len = p->len, pos = 0;
    int line = 1;
    bool line_starting = true;
    /* jinja2 drops one trailing newline (keep_trailing_newline=False). */
    if (len > 0 && s[len - 1] == '\n')
        len--;
    p->len = len;
    while (pos < len) {
        size_t idx = pos;
        while (idx + 1 < len && !(s[idx] == '{' && (s[idx + 1] == '{' || s[idx + 1] == '%' || s[idx + 1] == '#')))
            idx++;
        if (idx + 1 >= len) {
            push_data(p, line, s + pos, len - pos);
            break;
        }
        char kind = s[idx + 1];
        char sign = (idx + 2 < len && (s[idx + 2] == '-' || s[idx + 2] == '+')) ? s[idx + 2] : 0;
        size_t n = strip_before_tag(s + pos, idx - pos, sign, kind == '{', line_starting);
        if (n)
            push_data(p, line, s + pos, n);
        line += count_lines(s + pos, idx - pos);
        size_t i = idx + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t e = i;
            while (e + 1 < len && !(s[e] == '#' && s[e + 1] == '}'))
                e++;
            if (e + 1 >= len)
                fail(p, line, "missing end of comment tag");
            char es = (e > i && (s[e - 1] == '-' || s[e - 1] == '+')) ? s[e - 1] : 0;
            line += count_lines(s + i, e - i);
            size_t after = e + 2;
            if (es == '-')
                after = skip_space(s, len, after);
            else if (es != '+' && after < len && s[after] == '\n')
                after++;
            line += count_lines(s + e + 2, after - e - 2);
            line_starting = after > e + 2 && s[after - 1] == '\n';
            pos = after;
            continue;
        }
        char raw_sign;
        size_t body = kind == '%' ? raw_open(p, i, &raw_sign) : 0;
        if (body) {
            if (raw_sign == '-')
                body = skip_space(s, len, body);
            /* find {%[-+]? endraw [-+]?%} */
            size_t e = body;
            for (;;) {
                while (e + 1 < len && !(s[e] == '{' && s[e + 1] == '%'))
                    e++;
                if (e + 1 >= len)
                    fail(p, line, "missing '{%% endraw %%}'");
                size_t j = e + 2;
                char es = 0;
                if (j < len && (s[j] == '-' || s[j] == '+'))
                    es = s[j++];
                j = skip_space(s, len, j);
                if (j + 6 <= len && memcmp(s + j, "endraw", 6) == 0) {
                    j = skip_space(s, len, j + 6);
                    char cs = 0;
                    if (j < len && (s[j] == '-' || s[j] == '+'))
                        cs = s[j++];
                    if (j + 2 <= len && s[j] == '%' && s[j + 1] == '}') {
                        bool ls = body > 0 && s[body - 1] == '\n';
                        size_t dn = strip_before_tag(s + body, e - body, es, false, ls);
                        if (dn)
                            push_data(p, line + count_lines(s + i, body - i), s + body, dn);
                        size_t after = j + 2;
                        if (cs == '-')
                            after = skip_space(s, len, after);
                        else if (cs != '+' && after < len && s[after] == '\n')
                            after++;
                        line += count_lines(s + i, after - i);
                        line_starting = s[after - 1] == '\n';
                        pos = after;
                        break;
                    }
                }
                e += 2;
            }
            continue;
        }
        bool is_var = kind == '{';
        push_tok(p, is_var ? T_VAR_BEGIN : T_BLOCK_BEGIN, line);
        pos = lex_tag(p, i, &line, is_var, &line_starting);
    }
    push_tok(p, T_EOF, line);
}

/* ----------------------------------------------------------------------------------------------- parser */

static tok *peek(parser *p)
{
    return &p->toks[p->pos];
}

static tok *peek2(parser *p)
{
    return &p->toks[p->pos + 1 < p->ntok ? p->pos + 1 : p->pos];
}

static tok *next_tok(parser *p)
{
    tok *t = &p->toks[p->pos];
    if (t->type != T_EOF)
        p->pos++;
    return t;
}

static bool tok_is(tok *t, int type, const char *text)
{
    return t->type == type && strlen(text) == t->n && memcmp(t->p, text, t->n) == 0;
}

static bool is_op(parser *p, const char *op)
{
    return tok_is(peek(p), T_OP, op);
}

static bool is_name(parser *p, const char *name)
{
    return tok_is(peek(p), T_NAME, name);
}

static bool skip_op(parser *p, const char *op)
{
    if (!is_op(p, op))
        return false;
    p->pos++;
    return true;
}

static bool skip_name(parser *p, const char *name)
{
    if (!is_name(p, name))
        return false;
    p->pos++;
    return true;
}

static const char *tok_desc(tok *t, char *buf, size_t n)
{
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    default:
        snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p);
        return buf;
    }
}

static void expect_op(parser *p, const char *op)
{
    if (!skip_op(p, op)) {
        char b[64];
        fail(p, peek(p)->line, "expected '%s', got %s", op, tok_desc(peek(p), b, sizeof(b)));
    }
}

static void expect_type(parser *p, int type, const char *what)
{
    if (peek(p)->type != type) {
        char b[64];
        fail(p, peek(p)->line, "expected %s, got %s", what, tok_desc(peek(p), b, sizeof(b)));
    }
    next_tok(p);
}

static tok *expect_name(parser *p)
{
    if (peek(p)->type != T_NAME) {
        char b[64];
        fail(p, peek(p)->line, "expected a name, got %s", tok_desc(peek(p), b, sizeof(b)));
    }
    return next_tok(p);
}

static expr *mk(parser *p, int kind, int line)
{
    expr *e = palloc(p, sizeof(*e));
    e->kind = (uint8_t)kind;
    e->line = line;
    return e;
}

static expr *parse_expr(parser *p, bool with_cond);
static expr *parse_unary(parser *p, bool with_filter);
static expr *parse_primary(parser *p);
static expr *parse_postfix(parser *p, expr *e);

/* Arguments of a call, filter or test: positional first, then keyword. */
static void parse_args(parser *p, expr *e)
{
    expect_op(p, "(");
    expr *args[64];
    const char *kw[64];
    size_t kwl[64];
    int n = 0;
    bool seen_kw = false;
    while (!is_op(p, ")")) {
        if (n > 0)
            expect_op(p, ",");
        if (is_op(p, ")"))
            break;
        if (is_op(p, "*") || is_op(p, "**"))
            fail(p, peek(p)->line, "unsupported construct: '*args' / '**kwargs' in a call");
        if (n == 64)
            fail(p, peek(p)->line, "too many arguments");
        if (peek(p)->type == T_NAME && tok_is(peek2(p), T_OP, "=")) {
            tok *t = next_tok(p);
            next_tok(p);
            kw[n] = t->p;
            kwl[n] = t->n;
            seen_kw = true;
        } else {
            if (seen_kw)
                fail(p, peek(p)->line, "positional argument after keyword argument");
            kw[n] = NULL;
            kwl[n] = 0;
        }
        args[n++] = parse_expr(p, true);
    }
    expect_op(p, ")");
    e->nargs = n;
    if (n) {
        e->args = palloc(p, (size_t)n * sizeof(expr *));
        e->kw = palloc(p, (size_t)n * sizeof(char *));
        e->kwlen = palloc(p, (size_t)n * sizeof(size_t));
        memcpy(e->args, args, (size_t)n * sizeof(expr *));
        memcpy(e->kw, kw, (size_t)n * sizeof(char *));
        memcpy(e->kwlen, kwl, (size_t)n * sizeof(size_t));
    }
}

static void set_items(parser *p, expr *e, expr **items, int n)
{
    e->nargs = n;
    if (n) {
        e->args = palloc(p, (size_t)n * sizeof(expr *));
        memcpy(e->args, items, (size_t)n * sizeof(expr *));
    }
}

/* Comma-separated expressions; a tuple when there is a comma (or explicit parentheses with none). */
static expr *parse_tuple(parser *p, bool with_cond, bool explicit_parens)
{
    int line = peek(p)->line;
    expr **items = NULL;
    int n = 0, cap = 0;
    bool comma = false;
    for (;;) {
        if (n) {
            if (!skip_op(p, ","))
                break;
            comma = true;
        }
        tok *t = peek(p);
        if (t->type == T_VAR_END || t->type == T_BLOCK_END || tok_is(t, T_OP, ")") ||
            tok_is(t, T_NAME, "in") || tok_is(t, T_NAME, "recursive") || (n && tok_is(t, T_NAME, "if")))
            break;
        if (n == cap) {
            int nc = cap ? cap * 2 : 4;
            if (nc > (1 << 20))
                fail(p, line, "tuple too long");
            expr **ni = palloc(p, (size_t)nc * sizeof(expr *));
            if (n)
                memcpy(ni, items, (size_t)n * sizeof(expr *));
            items = ni;
            cap = nc;
        }
        items[n++] = parse_expr(p, with_cond);
    }
    if (!comma) {
        if (n == 1)
            return items[0];
        if (!explicit_parens) {
            char b[64];
            fail(p, line, "expected an expression, got %s", tok_desc(peek(p), b, sizeof(b)));
        }
    }
    expr *e = mk(p, E_TUPLE, line);
    e->nargs = n;
    e->args = items;
    return e;
}

/* map('upper'), select('odd'), selectattr('x', 'equalto', y) name a filter or test in a string: when it is
 * a literal, check it now so an unsupported one fails at load time like any other. */
static void check_named_callable(parser *p, expr *e, tok *t)
{
    bool is_map = t->n == 3 && memcmp(t->p, "map", 3) == 0;
    bool is_sel = (t->n == 6 && (memcmp(t->p, "select", 6) == 0 || memcmp(t->p, "reject", 6) == 0));
    bool is_attr = t->n == 10 && (memcmp(t->p, "selectattr", 10) == 0 || memcmp(t->p, "rejectattr", 10) == 0);
    if (!is_map && !is_sel && !is_attr)
        return;
    int want = is_attr ? 1 : 0, pos = 0;
    for (int i = 0; i < e->nargs; i++) {
        if (e->kw && e->kw[i])
            continue;
        if (pos++ != want)
            continue;
        expr *a = e->args[i];
        if (a->kind != E_CONST || a->lit.t != V_STR)
            return;
        bool known = is_map ? tpl_filter_lookup(a->lit.u.s.p, a->lit.u.s.n) != 0
                            : tpl_test_lookup(a->lit.u.s.p, a->lit.u.s.n) != 0;
        if (!known)
            fail(p, t->line, "unsupported %s '%.*s' (named in '%.*s')", is_map ? "filter" : "test",
                 (int)a->lit.u.s.n, a->lit.u.s.p, (int)t->n, t->p);
    }
}

static expr *parse_filter(parser *p, expr *node)
{
    tok *t = expect_name(p);
    expr *e = mk(p, E_FILTER, t->line);
    e->name = t->p;
    e->name_len = t->n;
    e->a = node;
    e->id = tpl_filter_lookup(t->p, t->n);
    if (!e->id)
        fail(p, t->line, "unsupported filter '%.*s'", (int)t->n, t->p);
    if (is_op(p, "("))
        parse_args(p, e);
    check_named_callable(p, e, t);
    return e;
}

static expr *parse_filter_expr(parser *p, expr *node)
{
    for (;;) {
        if (skip_op(p, "|")) {
            node = parse_filter(p, node);
        } else if (is_name(p, "is")) {
            int line = next_tok(p)->line;
            bool neg = skip_name(p, "not");
            tok *t = expect_name(p);
            expr *e = mk(p, E_TEST, line);
            e->op = neg;
            e->name = t->p;
            e->name_len = t->n;
            e->a = node;
            e->id = tpl_test_lookup(t->p, t->n);
            if (!e->id)
                fail(p, t->line, "unsupported test '%.*s'", (int)t->n, t->p);
            tok *n2 = peek(p);
            if (tok_is(n2, T_OP, "(")) {
                parse_args(p, e);
            } else if ((n2->type == T_NAME || n2->type == T_STRING || n2->type == T_INT || n2->type == T_FLOAT ||
                        tok_is(n2, T_OP, "[") || tok_is(n2, T_OP, "{")) &&
                       !tok_is(n2, T_NAME, "else") && !tok_is(n2, T_NAME, "or") && !tok_is(n2, T_NAME, "and")) {
                if (tok_is(n2, T_NAME, "is"))
                    fail(p, n2->line, "You cannot chain multiple tests with is");
                expr *arg = parse_postfix(p, parse_primary(p));
                e->nargs = 1;
                e->args = palloc(p, sizeof(expr *));
                e->kw = palloc(p, sizeof(char *));
                e->kwlen = palloc(p, sizeof(size_t));
                e->args[0] = arg;
            }
            node = e;
        } else {
            return node;
        }
    }
}

static void note_call(parser *p, expr *e)
{
    grow(p, (void **)&p->calls, &p->calls_cap, p->ncalls, sizeof(expr *));
    p->calls[p->ncalls++] = e;
}

static expr *parse_postfix(parser *p, expr *node)
{
    for (;;) {
        tok *t = peek(p);
        if (tok_is(t, T_OP, ".")) {
            next_tok(p);
            tok *n = next_tok(p);
            if (n->type == T_INT) {
                expr *e = mk(p, E_ITEM, n->line);
                e->a = node;
                e->b = mk(p, E_CONST, n->line);
                e->b->lit = v_int(n->i);
                node = e;
                continue;
            }
            if (n->type != T_NAME) {
                char b[64];
                fail(p, n->line, "expected an attribute name after '.', got %s", tok_desc(n, b, sizeof(b)));
            }
            expr *e = mk(p, E_ATTR, n->line);
            e->a = node;
            e->name = n->p;
            e->name_len = n->n;
            node = e;
        } else if (tok_is(t, T_OP, "[")) {
            next_tok(p);
            expr *parts[3] = {NULL, NULL, NULL};
            int k = 0;
            bool slice = false;
            for (;;) {
                if (is_op(p, "]"))
                    break;
                if (is_op(p, ":")) {
                    next_tok(p);
                    slice = true;
                    if (++k > 2)
                        fail(p, t->line, "invalid slice");
                    continue;
                }
                if (parts[k])
                    fail(p, t->line, "expected ']' in subscript");
                parts[k] = parse_expr(p, true);
                if (!slice && is_op(p, ","))
                    fail(p, t->line, "unsupported construct: tuple subscript");
            }
            expect_op(p, "]");
            expr *e;
            if (slice) {
                e = mk(p, E_SLICE, t->line);
                e->a = node;
                e->nargs = 3;
                e->args = palloc(p, 3 * sizeof(expr *));
                memcpy(e->args, parts, sizeof(parts));
            } else {
                if (!parts[0])
                    fail(p, t->line, "expected a subscript expression");
                e = mk(p, E_ITEM, t->line);
                e->a = node;
                e->b = parts[0];
            }
            node = e;
        } else if (tok_is(t, T_OP, "(")) {
            expr *e;
            if (node->kind == E_ATTR) {
                e = mk(p, E_METHOD, t->line);
                e->a = node->a;
                e->name = node->name;
                e->name_len = node->name_len;
                e->id = tpl_method_lookup(node->name, node->name_len);
                if (!e->id)
                    fail(p, t->line, "unsupported method '.%.*s()'", (int)node->name_len, node->name);
            } else if (node->kind == E_NAME) {
                e = mk(p, E_CALL, t->line);
                e->name = node->name;
                e->name_len = node->name_len;
                e->id = tpl_function_lookup(node->name, node->name_len);
                if (node->name_len == 4 && memcmp(node->name, "loop", 4) == 0)
                    fail(p, t->line, "unsupported construct: recursive loop call 'loop(...)'");
                if (!e->id)
                    note_call(p, e);
            } else {
                fail(p, t->line, "unsupported construct: calling the result of an expression");
            }
            parse_args(p, e);
            node = e;
        } else {
            return node;
        }
    }
}

static expr *parse_primary(parser *p)
{
    tok *t = next_tok(p);
    expr *e;
    switch (t->type) {
    case T_NAME:
        e = mk(p, E_CONST, t->line);
        if (tok_is(t, T_NAME, "true") || tok_is(t, T_NAME, "True"))
            e->lit = v_bool(true);
        else if (tok_is(t, T_NAME, "false") || tok_is(t, T_NAME, "False"))
            e->lit = v_bool(false);
        else if (tok_is(t, T_NAME, "none") || tok_is(t, T_NAME, "None"))
            e->lit = v_none();
        else {
            e->kind = E_NAME;
            e->name = t->p;
            e->name_len = t->n;
        }
        return e;
    case T_STRING: {
        e = mk(p, E_CONST, t->line);
        if (peek(p)->type != T_STRING) {
            e->lit = v_str(t->p, t->n);
            return e;
        }
        sbuf b;
        tpl_sb_init(&b, p->a, 64);
        tpl_sb_put(&b, t->p, t->n);
        while (peek(p)->type == T_STRING) {
            tok *s = next_tok(p);
            tpl_sb_put(&b, s->p, s->n);
        }
        e->lit = v_str(b.p, b.n);
        return e;
    }
    case T_INT:
        e = mk(p, E_CONST, t->line);
        e->lit = v_int(t->i);
        return e;
    case T_FLOAT:
        e = mk(p, E_CONST, t->line);
        if (t->i == 1) {
            e->lit.t = V_BIGINT;
            e->lit.u.s.p = t->p;
            e->lit.u.s.n = t->n;
        } else {
            e->lit = v_float(t->f);
        }
        return e;
    case T_OP:
        if (tok_is(t, T_OP, "(")) {
            e = parse_tuple(p, true, true);
            expect_op(p, ")");
            return e;
        }
        if (tok_is(t, T_OP, "[") || tok_is(t, T_OP, "{")) {
            /* items grow in the arena, not on the stack: literals nest */
            bool is_dict = t->p[0] == '{';
            const char *close = is_dict ? "}" : "]";
            expr **items = NULL;
            int n = 0, cap = 0;
            while (!is_op(p, close)) {
                if (n)
                    expect_op(p, ",");
                if (is_op(p, close))
                    break;
                if (n + 2 > cap) {
                    int nc = cap ? cap * 2 : 8;
                    if (nc > (1 << 20))
                        fail(p, t->line, "literal too long");
                    expr **ni = palloc(p, (size_t)nc * sizeof(expr *));
                    if (n)
                        memcpy(ni, items, (size_t)n * sizeof(expr *));
                    items = ni;
                    cap = nc;
                }
                items[n++] = parse_expr(p, true);
                if (is_dict) {
                    expect_op(p, ":");
                    items[n++] = parse_expr(p, true);
                }
            }
            expect_op(p, close);
            e = mk(p, is_dict ? E_DICT : E_LIST, t->line);
            e->nargs = n;
            e->args = items;
            return e;
        }
        /* fallthrough */
    default: {
        char b[64];
        fail(p, t->line, "unexpected %s in expression", tok_desc(t, b, sizeof(b)));
    }
    }
}

static expr *parse_unary(parser *p, bool with_filter)
{
    tok *t = peek(p);
    expr *node;
    if (++p->depth > 200)
        fail(p, t->line, "expression nested too deeply");
    if (tok_is(t, T_OP, "-") || tok_is(t, T_OP, "+")) {
        next_tok(p);
        node = mk(p, t->p[0] == '-' ? E_NEG : E_POS, t->line);
        node->a = parse_unary(p, false);
    } else {
        node = parse_postfix(p, parse_primary(p));
    }
    if (with_filter)
        node = parse_filter_expr(p, node);
    p->depth--;
    return node;
}

static expr *binary(parser *p, int op, expr *l, expr *r, int line)
{
    expr *e = mk(p, E_BIN, line);
    e->op = (uint8_t)op;
    e->a = l;
    e->b = r;
    return e;
}

static expr *parse_pow(parser *p)
{
    expr *l = parse_unary(p, true);
    while (is_op(p, "**")) {
        int line = next_tok(p)->line;
        l = binary(p, OP_POW, l, parse_unary(p, true), line);
    }
    return l;
}

static expr *parse_math2(parser *p)
{
    expr *l = parse_pow(p);
    for (;;) {
        int op = is_op(p, "*") ? OP_MUL : is_op(p, "/") ? OP_DIV : is_op(p, "//") ? OP_FLOORDIV
               : is_op(p, "%") ? OP_MOD : 0;
        if (!op)
            return l;
        int line = next_tok(p)->line;
        l = binary(p, op, l, parse_pow(p), line);
    }
}

static expr *parse_concat(parser *p)
{
    expr *l = parse_math2(p);
    while (is_op(p, "~")) {
        int line = next_tok(p)->line;
        l = binary(p, OP_CONCAT, l, parse_math2(p), line);
    }
    return l;
}

static expr *parse_math1(parser *p)
{
    expr *l = parse_concat(p);
    for (;;) {
        int op = is_op(p, "+") ? OP_ADD : is_op(p, "-") ? OP_SUB : 0;
        if (!op)
            return l;
        int line = next_tok(p)->line;
        l = binary(p, op, l, parse_concat(p), line);
    }
}

static expr *parse_compare(parser *p)
{
    int line = peek(p)->line;
    expr *first = parse_math1(p);
    expr *operands[32];
    uint8_t ops[32];
    int n = 0;
    for (;;) {
        int op = 0;
        if (is_op(p, "=="))
            op = OP_EQ;
        else if (is_op(p, "!="))
            op = OP_NE;
        else if (is_op(p, "<"))
            op = OP_LT;
        else if (is_op(p, "<="))
            op = OP_LE;
        else if (is_op(p, ">"))
            op = OP_GT;
        else if (is_op(p, ">="))
            op = OP_GE;
        else if (is_name(p, "in"))
            op = OP_IN;
        else if (is_name(p, "not") && tok_is(peek2(p), T_NAME, "in")) {
            next_tok(p);
            op = OP_NOTIN;
        }
        if (!op)
            break;
        next_tok(p);
        if (n == 32)
            fail(p, line, "comparison chain too long");
        ops[n] = (uint8_t)op;
        operands[n++] = parse_math1(p);
    }
    if (!n)
        return first;
    expr *e = mk(p, E_CMP, line);
    e->a = first;
    set_items(p, e, operands, n);
    e->ops = palloc(p, (size_t)n);
    memcpy(e->ops, ops, (size_t)n);
    return e;
}

static expr *parse_not(parser *p)
{
    if (is_name(p, "not")) {
        int line = next_tok(p)->line;
        expr *e = mk(p, E_NOT, line);
        e->a = parse_not(p);
        return e;
    }
    return parse_compare(p);
}

static expr *parse_and(parser *p)
{
    expr *l = parse_not(p);
    while (is_name(p, "and")) {
        int line = next_tok(p)->line;
        expr *e = mk(p, E_AND, line);
        e->a = l;
        e->b = parse_not(p);
        l = e;
    }
    return l;
}

static expr *parse_or(parser *p)
{
    expr *l = parse_and(p);
    while (is_name(p, "or")) {
        int line = next_tok(p)->line;
        expr *e = mk(p, E_OR, line);
        e->a = l;
        e->b = parse_and(p);
        l = e;
    }
    return l;
}

static expr *parse_expr(parser *p, bool with_cond)
{
    expr *e = parse_or(p);
    if (!with_cond)
        return e;
    while (is_name(p, "if")) {
        int line = next_tok(p)->line;
        expr *c = mk(p, E_COND, line);
        c->a = e;
        c->c = parse_or(p);
        if (skip_name(p, "else"))
            c->b = parse_expr(p, true);
        e = c;
    }
    return e;
}

/* ------------------------------------------------------------------------------------------- statements */

static stmt *mks(parser *p, int kind, int line)
{
    stmt *s = palloc(p, sizeof(*s));
    s->kind = (uint8_t)kind;
    s->line = line;
    return s;
}

static stmt *parse_body(parser *p, const char *const *stops, int *which, int open_line, const char *open_tag);

static void end_block(parser *p)
{
    expect_type(p, T_BLOCK_END, "'%}'");
}

static void targets_of(parser *p, stmt *s, bool allow_attr)
{
    name_ref names[32];
    int n = 0;
    bool paren = skip_op(p, "(");
    for (;;) {
        tok *t = expect_name(p);
        if (n == 32)
            fail(p, t->line, "too many assignment targets");
        names[n].p = t->p;
        names[n].n = t->n;
        n++;
        if (allow_attr && n == 1 && is_op(p, ".")) {
            next_tok(p);
            tok *a = expect_name(p);
            names[n].p = a->p;
            names[n].n = a->n;
            n++;
            s->kind = S_SET_ATTR;
            break;
        }
        if (!skip_op(p, ","))
            break;
        s->unpack = true;
        if (paren && is_op(p, ")"))
            break;
    }
    if (paren) {
        expect_op(p, ")");
        s->unpack = true;
    }
    s->ntargets = n;
    s->targets = palloc(p, (size_t)n * sizeof(name_ref));
    memcpy(s->targets, names, (size_t)n * sizeof(name_ref));
}

static void parse_params(parser *p, stmt *s)
{
    name_ref names[64];
    expr *defs[64];
    int n = 0;
    expect_op(p, "(");
    while (!is_op(p, ")")) {
        if (n)
            expect_op(p, ",");
        if (is_op(p, ")"))
            break;
        tok *t = expect_name(p);
        if (n == 64)
            fail(p, t->line, "too many macro parameters");
        names[n].p = t->p;
        names[n].n = t->n;
        defs[n] = skip_op(p, "=") ? parse_expr(p, true) : NULL;
        n++;
    }
    expect_op(p, ")");
    s->ntargets = n;
    if (n) {
        s->targets = palloc(p, (size_t)n * sizeof(name_ref));
        s->defaults = palloc(p, (size_t)n * sizeof(expr *));
        memcpy(s->targets, names, (size_t)n * sizeof(name_ref));
        memcpy(s->defaults, defs, (size_t)n * sizeof(expr *));
    }
}

/* A filter chain applied to the captured body of {% set x | f %} or {% filter f %}. */
static expr *parse_filter_chain(parser *p, int line)
{
    expr *node = mk(p, E_PLACEHOLDER, line);
    node = parse_filter(p, node);
    while (skip_op(p, "|"))
        node = parse_filter(p, node);
    return node;
}

static stmt *parse_statement_inner(parser *p, tok *kw, int line, int *whichp);

static const char *const UNSUPPORTED_TAGS[] = {"include", "extends", "import", "from", "block", "autoescape",
                                               "trans", "pluralize", "do", "print", "debug", NULL};

static stmt *parse_statement(parser *p, tok *kw)
{
    int line = kw->line;
    int which;
    if (++p->depth > 200)
        fail(p, line, "blocks nested too deeply");
    stmt *r = parse_statement_inner(p, kw, line, &which);
    p->depth--;
    return r;
}

static stmt *parse_statement_inner(parser *p, tok *kw, int line, int *whichp)
{
#define which (*whichp)
    if (tok_is(kw, T_NAME, "if")) {
        stmt *s = mks(p, S_IF, line);
        s->e = parse_tuple(p, false, false);
        end_block(p);
        static const char *const stops[] = {"elif", "else", "endif", NULL};
        s->body = parse_body(p, stops, &which, line, "if");
        stmt *cur = s;
        for (;;) {
            if (which == 0) {
                stmt *el = mks(p, S_IF, peek(p)->line);
                el->e = parse_tuple(p, false, false);
                end_block(p);
                el->body = parse_body(p, stops, &which, line, "if");
                cur->else_body = el;
                cur = el;
            } else if (which == 1) {
                end_block(p);
                static const char *const end_only[] = {"endif", NULL};
                cur->else_body = parse_body(p, end_only, &which, line, "if");
                end_block(p);
                return s;
            } else {
                end_block(p);
                return s;
            }
        }
    }
    if (tok_is(kw, T_NAME, "for")) {
        stmt *s = mks(p, S_FOR, line);
        targets_of(p, s, false);
        if (!skip_name(p, "in"))
            fail(p, line, "expected 'in' in for loop");
        s->e = parse_tuple(p, false, false);
        if (skip_name(p, "if"))
            s->cond = parse_expr(p, true);
        if (is_name(p, "recursive"))
            fail(p, line, "unsupported construct: recursive for loop");
        end_block(p);
        static const char *const stops[] = {"endfor", "else", NULL};
        p->loop_depth++;
        s->body = parse_body(p, stops, &which, line, "for");
        p->loop_depth--;
        end_block(p);
        if (which == 1) {
            static const char *const end_only[] = {"endfor", NULL};
            s->else_body = parse_body(p, end_only, &which, line, "for");
            end_block(p);
        }
        return s;
    }
    if (tok_is(kw, T_NAME, "set")) {
        stmt *s = mks(p, S_SET, line);
        targets_of(p, s, true);
        if (skip_op(p, "=")) {
            s->e = parse_tuple(p, true, false);
            end_block(p);
            return s;
        }
        if (s->kind != S_SET || s->ntargets != 1)
            fail(p, line, "unsupported construct: block set of '%.*s'", (int)s->targets[0].n, s->targets[0].p);
        s->kind = S_SET_BLOCK;
        if (skip_op(p, "|"))
            s->cond = parse_filter_chain(p, line);
        end_block(p);
        static const char *const stops[] = {"endset", NULL};
        s->body = parse_body(p, stops, &which, line, "set");
        end_block(p);
        return s;
    }
    if (tok_is(kw, T_NAME, "macro")) {
        stmt *s = mks(p, S_MACRO, line);
        tok *n = expect_name(p);
        s->name.p = n->p;
        s->name.n = n->n;
        parse_params(p, s);
        end_block(p);
        grow(p, (void **)&p->macros, &p->macros_cap, p->nmacros, sizeof(name_ref));
        p->macros[p->nmacros++] = s->name;
        int saved = p->loop_depth;
        p->loop_depth = 0;
        p->macro_depth++;
        static const char *const stops[] = {"endmacro", NULL};
        s->body = parse_body(p, stops, &which, line, "macro");
        p->macro_depth--;
        p->loop_depth = saved;
        end_block(p);
        return s;
    }
    if (tok_is(kw, T_NAME, "call")) {
        stmt *s = mks(p, S_CALL_BLOCK, line);
        if (is_op(p, "("))
            parse_params(p, s);
        s->e = parse_expr(p, true);
        if (s->e->kind != E_CALL && s->e->kind != E_METHOD)
            fail(p, line, "expected a macro call after 'call'");
        end_block(p);
        int saved = p->loop_depth;
        p->loop_depth = 0;
        p->macro_depth++;
        static const char *const stops[] = {"endcall", NULL};
        s->body = parse_body(p, stops, &which, line, "call");
        p->macro_depth--;
        p->loop_depth = saved;
        end_block(p);
        return s;
    }
    if (tok_is(kw, T_NAME, "filter")) {
        stmt *s = mks(p, S_FILTER_BLOCK, line);
        s->cond = parse_filter_chain(p, line);
        end_block(p);
        static const char *const stops[] = {"endfilter", NULL};
        s->body = parse_body(p, stops, &which, line, "filter");
        end_block(p);
        return s;
    }
    if (tok_is(kw, T_NAME, "with")) {
        stmt *s = mks(p, S_WITH, line);
        name_ref names[32];
        expr *vals[32];
        int n = 0;
        while (peek(p)->type != T_BLOCK_END) {
            if (n)
                expect_op(p, ",");
            tok *t = expect_name(p);
            if (n == 32)
                fail(p, line, "too many 'with' assignments");
            names[n].p = t->p;
            names[n].n = t->n;
            expect_op(p, "=");
            vals[n++] = parse_expr(p, true);
        }
        end_block(p);
        s->ntargets = n;
        if (n) {
            s->targets = palloc(p, (size_t)n * sizeof(name_ref));
            s->defaults = palloc(p, (size_t)n * sizeof(expr *));
            memcpy(s->targets, names, (size_t)n * sizeof(name_ref));
            memcpy(s->defaults, vals, (size_t)n * sizeof(expr *));
        }
        static const char *const stops[] = {"endwith", NULL};
        s->body = parse_body(p, stops, &which, line, "with");
        end_block(p);
        return s;
    }
    if (tok_is(kw, T_NAME, "generation")) {
        /* transformers' AssistantTracker tag: renders its body unchanged. */
        stmt *s = mks(p, S_BODY, line);
        end_block(p);
        static const char *const stops[] = {"endgeneration", NULL};
        s->body = parse_body(p, stops, &which, line, "generation");
        end_block(p);
        return s;
    }
    if (tok_is(kw, T_NAME, "break") || tok_is(kw, T_NAME, "continue")) {
        if (!p->loop_depth)
            fail(p, line, "'%.*s' outside of a loop", (int)kw->n, kw->p);
        stmt *s = mks(p, kw->p[0] == 'b' ? S_BREAK : S_CONTINUE, line);
        end_block(p);
        return s;
    }
    for (int i = 0; UNSUPPORTED_TAGS[i]; i++)
        if (tok_is(kw, T_NAME, UNSUPPORTED_TAGS[i]))
            fail(p, line, "unsupported construct '{%% %s %%}'", UNSUPPORTED_TAGS[i]);
    fail(p, line, "unknown tag '%.*s'", (int)kw->n, kw->p);
#undef which
}

static stmt *parse_body(parser *p, const char *const *stops, int *which, int open_line, const char *open_tag)
{
    stmt head = {0}, *tail = &head;
    for (;;) {
        tok *t = next_tok(p);
        stmt *s = NULL;
        if (t->type == T_EOF) {
            if (stops)
                fail(p, t->line, "unexpected end of template: '{%% %s %%}' opened on line %d is not closed "
                     "(expected '%s')", open_tag, open_line, stops[0]);
            *which = -1;
            return head.next;
        }
        if (t->type == T_DATA) {
            s = mks(p, S_TEXT, t->line);
            s->text = t->p;
            s->text_len = t->n;
        } else if (t->type == T_VAR_BEGIN) {
            s = mks(p, S_OUTPUT, t->line);
            s->e = parse_tuple(p, true, false);
            expect_type(p, T_VAR_END, "'}}'");
        } else if (t->type == T_BLOCK_BEGIN) {
            tok *kw = expect_name(p);
            if (stops)
                for (int i = 0; stops[i]; i++)
                    if (tok_is(kw, T_NAME, stops[i])) {
                        *which = i;
                        return head.next;
                    }
            static const char *const enders[] = {"endif", "endfor", "endset", "endmacro", "endcall", "endfilter",
                                                 "endwith", "endgeneration", "elif", "else", "endraw", NULL};
            for (int i = 0; enders[i]; i++)
                if (tok_is(kw, T_NAME, enders[i]))
                    fail(p, kw->line, "unexpected '%s'%s%s", enders[i], stops ? ", expected " : "",
                         stops ? stops[0] : "");
            s = parse_statement(p, kw);
        } else {
            char b[64];
            fail(p, t->line, "unexpected %s", tok_desc(t, b, sizeof(b)));
        }
        tail->next = s;
        tail = s;
    }
}

static void check_calls(parser *p)
{
    for (size_t i = 0; i < p->ncalls; i++) {
        expr *e = p->calls[i];
        if (e->name_len == 6 && memcmp(e->name, "caller", 6) == 0)
            continue;
        bool found = false;
        for (size_t m = 0; m < p->nmacros && !found; m++)
            found = p->macros[m].n == e->name_len && memcmp(p->macros[m].p, e->name, e->name_len) == 0;
        if (!found)
            fail(p, e->line, "unsupported function '%.*s()' (not a macro of this template nor a known global)",
                 (int)e->name_len, e->name);
    }
}

int srt_chat_template_compile(const char *src, size_t len, srt_chat_template **out, srt_err *err)
{
    *out = NULL;
    if (!src) {
        srt_err_set(err, "chat template: no source");
        return SRT_ERROR;
    }
    if (len > (64u << 20)) {
        srt_err_set(err, "chat template: source too large (%zu bytes)", len);
        return SRT_ERROR;
    }
    srt_chat_template *t = calloc(1, sizeof(*t));
    if (!t) {
        srt_err_set(err, "chat template: out of memory");
        return SRT_ERROR;
    }
    tpl_arena_init(&t->arena, 0);
    /* The tree points into the source, so keep a copy. */
    char *copy = tpl_arena_memdup(&t->arena, src, len);
    parser *p = calloc(1, sizeof(*p));
    if (!copy || !p) {
        free(p);
        tpl_arena_free(&t->arena);
        free(t);
        srt_err_set(err, "chat template: out of memory");
        return SRT_ERROR;
    }
    p->a = &t->arena;
    p->err = err;
    p->src = copy;
    p->len = len;
    if (setjmp(p->jb)) {
        free(p->toks);
        free(p->calls);
        free(p->macros);
        free(p);
        tpl_arena_free(&t->arena);
        free(t);
        return SRT_ERROR;
    }
    lex(p);
    int which;
    t->root = parse_body(p, NULL, &which, 0, "");
    check_calls(p);
    free(p->toks);
    free(p->calls);
    free(p->macros);
    free(p);
    *out = t;
    return SRT_OK;
}

void srt_chat_template_free(srt_chat_template *t)
{
    if (!t)
        return;
    tpl_arena_free(&t->arena);
    free(t);
}
