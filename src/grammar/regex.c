/*
 * Regular expressions (SGLang's `regex`, JSON Schema's `pattern`) -> a GBNF expression.
 *
 * The syntax is the common subset of Python's re and ECMAScript: | ( ) (?: ) (?P<n> ) (?<n> )
 * * + ? {m} {m,} {m,n} (lazy forms match the same strings), [...] [^...], . (any character, a
 * newline too, as xgrammar reads it), \d \w \s \D \W \S (ASCII classes; \s also holds NBSP, as
 * in xgrammar), \n \r \t \f \v \0 \xHH \uHHHH, escaped punctuation, ^ at the start and $ at
 * the end (a constrained output always matches whole). What would need more than a grammar
 * (backreferences, lookaround, \b) is refused with the offset. Every class is written out
 * as code point ranges, so the GBNF parser sees no regex-only syntax.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

int ranges_normalize(uint32_t **ranges, int *n, int negate);

#define MAX_DEPTH 200


typedef struct {
    const char  *s;
    size_t       len, pos;
    sbuf         out;
    srt_err     *err;
    int          failed, depth;
} rx;


static int
rfail(rx *r, const char *fmt, ...)
{
    char    msg[256];
    va_list ap;

    if (!r->failed) {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        srt_err_set(r->err, "regex: %s at offset %zu", msg, r->pos);
        r->failed = 1;
    }
    return -1;
}


/* ---- sbuf ---- */

void
sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) {
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char  *p;
        while (cap < b->len + n + 1) {
            cap *= 2;
        }
        p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}


void
sb_puts(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}


void
sb_putc(sbuf *b, char c)
{
    sb_put(b, &c, 1);
}


void
sb_printf(sbuf *b, const char *fmt, ...)
{
    char    tmp[512];
    va_list ap;
    int     n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n >= (int) sizeof(tmp)) {
        char *big = malloc((size_t) n + 1);
        if (big == NULL) {
            b->oom = 1;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t) n + 1, fmt, ap);
        va_end(ap);
        sb_put(b, big, (size_t) n);
        free(big);
        return;
    }
    sb_put(b, tmp, (size_t) n);
}


/* ---- ranges ---- */

typedef struct {
    uint32_t *r;
    int       n, cap;
} rset;


static int
rs_add(rset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        uint32_t *p = realloc(s->r, (size_t) cap * 2 * sizeof(uint32_t));
        if (p == NULL) {
            return -1;
        }
        s->r = p;
        s->cap = cap;
    }
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
    return 0;
}


/* adds the ranges of \d \w \s, or of their complements */
static int
rs_add_shorthand(rset *s, char c)
{
    rset  t = { NULL, 0, 0 };
    int   i, neg = (c == 'D' || c == 'W' || c == 'S'), rc = 0;

    switch (c) {
    case 'd': case 'D':
        rc |= rs_add(&t, '0', '9');
        break;
    case 'w': case 'W':
        rc |= rs_add(&t, '0', '9');
        rc |= rs_add(&t, 'A', 'Z');
        rc |= rs_add(&t, '_', '_');
        rc |= rs_add(&t, 'a', 'z');
        break;
    default:        /* xgrammar's \s: ASCII whitespace and NBSP */
        rc |= rs_add(&t, '\t', '\r');
        rc |= rs_add(&t, ' ', ' ');
        rc |= rs_add(&t, 0xA0, 0xA0);
    }
    if (rc || ranges_normalize(&t.r, &t.n, neg) != 0) {
        free(t.r);
        return -1;
    }
    for (i = 0; i < t.n; i++) {
        rc |= rs_add(s, t.r[2 * i], t.r[2 * i + 1]);
    }
    free(t.r);
    return rc;
}


static void
emit_class(rx *r, rset *s, int negate)
{
    int i;

    if (ranges_normalize(&s->r, &s->n, negate) != 0) {
        r->out.oom = 1;
        return;
    }
    if (s->n == 0) {
        /* matches nothing: a class no code point is in */
        sb_puts(&r->out, "[^\\U00000000-\\U0010FFFF]");
        return;
    }
    sb_putc(&r->out, '[');
    for (i = 0; i < s->n; i++) {
        sb_printf(&r->out, "\\U%08X", s->r[2 * i]);
        if (s->r[2 * i + 1] != s->r[2 * i]) {
            sb_printf(&r->out, "-\\U%08X", s->r[2 * i + 1]);
        }
    }
    sb_putc(&r->out, ']');
}


static int
hexv(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}


/* One UTF-8 code point of the pattern. */
static int
rx_utf8(rx *r, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *) r->s + r->pos;
    size_t               left = r->len - r->pos, n, i;
    uint32_t             c;

    if (s[0] < 0x80) {
        *cp = s[0];
        r->pos++;
        return 0;
    }
    n = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || left < n) {
        return rfail(r, "invalid UTF-8");
    }
    c = s[0] & (0x7F >> n);
    for (i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return rfail(r, "invalid UTF-8");
        }
        c = (c << 6) | (s[i] & 0x3F);
    }
    r->pos += n;
    *cp = c;
    return 0;
}


/*
 * An escape after '\\' (r->pos at the letter). Returns 1 with *cp for a single code point, 2 when
 * it was a shorthand class (letter in *cls), -1 on error.
 */
static int
rx_escape(rx *r, uint32_t *cp, char *cls, int in_class)
{
    int       n, i, h;
    uint32_t  c;
    char      e;

    if (r->pos >= r->len) {
        return rfail(r, "pattern ends with '\\'");
    }
    e = r->s[r->pos++];
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        *cls = e;
        return 2;
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case '0': *cp = 0; return 1;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return 1;
        }
        r->pos--;
        return rfail(r, "word boundaries (\\b) are not supported");
    case 'x': n = 2; break;
    case 'u': n = 4; break;
    case 'U': n = 8; break;
    default:
        if ((e >= '1' && e <= '9') || e == 'k') {
            r->pos--;
            return rfail(r, "backreferences are not supported");
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
            r->pos--;
            return rfail(r, "unsupported escape '\\%c'", e);
        }
        r->pos--;
        return rx_utf8(r, cp) == 0 ? 1 : -1;
    }
    c = 0;
    for (i = 0; i < n; i++) {
        h = r->pos < r->len ? hexv((unsigned char) r->s[r->pos]) : -1;
        if (h < 0) {
            return rfail(r, "bad \\%c escape", e);
        }
        c = c * 16 + (uint32_t) h;
        r->pos++;
    }
    if (c > 0x10FFFF) {
        return rfail(r, "code point out of range");
    }
    *cp = c;
    return 1;
}


static int
rx_class(rx *r)
{
    rset      s = { NULL, 0, 0 };
    int       negate = 0, first = 1, k;
    uint32_t  lo, hi;
    char      cls;

    r->pos++;                               /* [ */
    if (r->pos < r->len && r->s[r->pos] == '^') {
        negate = 1;
        r->pos++;
    }
    for ( ;; ) {
        if (r->pos >= r->len) {
            free(s.r);
            return rfail(r, "unterminated character class");
        }
        if (r->s[r->pos] == ']' && !first) {
            r->pos++;
            break;
        }
        first = 0;
        if (r->s[r->pos] == '[' && r->pos + 1 < r->len && r->s[r->pos + 1] == ':') {
            free(s.r);
            return rfail(r, "POSIX classes ([:alpha:]) are not supported");
        }
        if (r->s[r->pos] == '\\') {
            r->pos++;
            k = rx_escape(r, &lo, &cls, 1);
            if (k < 0) {
                free(s.r);
                return -1;
            }
            if (k == 2) {
                if (rs_add_shorthand(&s, cls) != 0) {
                    free(s.r);
                    return rfail(r, "out of memory");
                }
                continue;
            }
        } else if (rx_utf8(r, &lo) != 0) {
            free(s.r);
            return -1;
        }
        hi = lo;
        if (r->pos + 1 < r->len && r->s[r->pos] == '-' && r->s[r->pos + 1] != ']') {
            r->pos++;
            if (r->s[r->pos] == '\\') {
                r->pos++;
                k = rx_escape(r, &hi, &cls, 1);
                if (k != 1) {
                    free(s.r);
                    return k < 0 ? -1 : rfail(r, "a class shorthand cannot end a range");
                }
            } else if (rx_utf8(r, &hi) != 0) {
                free(s.r);
                return -1;
            }
            if (hi < lo) {
                free(s.r);
                return rfail(r, "character range out of order");
            }
        }
        if (rs_add(&s, lo, hi) != 0) {
            free(s.r);
            return rfail(r, "out of memory");
        }
    }
    emit_class(r, &s, negate);
    free(s.r);
    return 0;
}


static int rx_alt(rx *r);


/* {m}, {m,}, {m,n}: 1 when one was read (and emitted), 0 when '{' is a literal here */
static int
rx_braces(rx *r)
{
    size_t  p = r->pos + 1;
    long    m = -1, n = -1;

    while (p < r->len && r->s[p] >= '0' && r->s[p] <= '9') {
        m = (m < 0 ? 0 : m) * 10 + (r->s[p++] - '0');
        if (m > 100000) {
            return rfail(r, "repetition count too large");
        }
    }
    if (p < r->len && r->s[p] == ',') {
        p++;
        while (p < r->len && r->s[p] >= '0' && r->s[p] <= '9') {
            n = (n < 0 ? 0 : n) * 10 + (r->s[p++] - '0');
            if (n > 100000) {
                return rfail(r, "repetition count too large");
            }
        }
        if (m < 0) {
            m = 0;          /* {,n}: Python reads it as {0,n} */
        }
        if (p >= r->len || r->s[p] != '}') {
            return 0;
        }
        if (n >= 0 && n < m) {
            return rfail(r, "repetition {%ld,%ld}: max below min", m, n);
        }
        if (n >= 0) {
            sb_printf(&r->out, "{%ld,%ld}", m, n);
        } else {
            sb_printf(&r->out, "{%ld,}", m);
        }
    } else {
        if (m < 0 || p >= r->len || r->s[p] != '}') {
            return 0;
        }
        sb_printf(&r->out, "{%ld}", m);
    }
    r->pos = p + 1;
    return 1;
}


static int
rx_atom(rx *r)
{
    uint32_t  c;
    char      cls;
    int       k;
    rset      s = { NULL, 0, 0 };

    switch (r->s[r->pos]) {
    case '(':
        r->pos++;
        if (r->pos < r->len && r->s[r->pos] == '?') {
            if (r->pos + 1 < r->len && r->s[r->pos + 1] == ':') {
                r->pos += 2;
            } else if (r->pos + 2 < r->len && r->s[r->pos + 1] == 'P' && r->s[r->pos + 2] == '<') {
                r->pos += 3;
                while (r->pos < r->len && r->s[r->pos] != '>') r->pos++;
                r->pos++;
            } else if (r->pos + 2 < r->len && r->s[r->pos + 1] == '<' && r->s[r->pos + 2] != '='
                       && r->s[r->pos + 2] != '!')
            {
                r->pos += 2;
                while (r->pos < r->len && r->s[r->pos] != '>') r->pos++;
                r->pos++;
            } else {
                r->pos--;
                return rfail(r, "lookaround and inline flags ('(?') are not supported");
            }
        }
        if (++r->depth > MAX_DEPTH) {
            return rfail(r, "groups nested too deeply");
        }
        sb_putc(&r->out, '(');
        if (rx_alt(r) != 0) {
            return -1;
        }
        r->depth--;
        if (r->pos >= r->len || r->s[r->pos] != ')') {
            return rfail(r, "missing ')'");
        }
        r->pos++;
        sb_putc(&r->out, ')');
        return 0;

    case '[':
        return rx_class(r);

    case '.':
        /* any code point, newline included (xgrammar's reading, which SGLang serves) */
        r->pos++;
        sb_puts(&r->out, "[\\U00000000-\\U0010FFFF]");
        return 0;

    case '\\':
        r->pos++;
        k = rx_escape(r, &c, &cls, 0);
        if (k < 0) {
            return -1;
        }
        if (k == 2) {
            if (rs_add_shorthand(&s, cls) != 0) {
                free(s.r);
                return rfail(r, "out of memory");
            }
            emit_class(r, &s, 0);
            free(s.r);
            return 0;
        }
        break;

    case '*': case '+': case '?':
        return rfail(r, "nothing to repeat");

    case '^':
        return rfail(r, "'^' is only supported at the start of the pattern");

    case '$':
        return rfail(r, "'$' is only supported at the end of the pattern");

    default:
        if (rx_utf8(r, &c) != 0) {
            return -1;
        }
    }
    sb_printf(&r->out, "[\\U%08X]", c);
    return 0;
}


static int
rx_seq(rx *r)
{
    int  any = 0, k;

    sb_putc(&r->out, '(');
    while (r->pos < r->len && r->s[r->pos] != '|' && r->s[r->pos] != ')') {
        if (r->s[r->pos] == '$' && r->pos + 1 == r->len && r->depth == 0) {
            r->pos++;
            break;
        }
        if (r->s[r->pos] == '{') {
            /* a literal '{' where it cannot be a quantifier */
            r->pos++;
            sb_puts(&r->out, " \"{\"");
            any = 1;
            continue;
        }
        sb_putc(&r->out, ' ');
        if (rx_atom(r) != 0) {
            return -1;
        }
        any = 1;
        /* quantifiers */
        for ( ;; ) {
            if (r->pos >= r->len) {
                break;
            }
            char q = r->s[r->pos];
            if (q == '*' || q == '+' || q == '?') {
                r->pos++;
                sb_putc(&r->out, q);
            } else if (q == '{') {
                k = rx_braces(r);
                if (k < 0) {
                    return -1;
                }
                if (k == 0) {
                    break;
                }
            } else {
                break;
            }
            /* lazy / possessive suffixes match the same strings */
            if (r->pos < r->len && (r->s[r->pos] == '?' || r->s[r->pos] == '+')) {
                r->pos++;
            }
            if (r->pos < r->len && (r->s[r->pos] == '*' || r->s[r->pos] == '+'
                                    || r->s[r->pos] == '?'))
            {
                return rfail(r, "multiple repeat");
            }
            break;
        }
    }
    if (!any) {
        sb_puts(&r->out, " \"\"");
    }
    sb_putc(&r->out, ')');
    return 0;
}


static int
rx_alt(rx *r)
{
    sb_putc(&r->out, '(');
    for ( ;; ) {
        if (rx_seq(r) != 0) {
            return -1;
        }
        if (r->pos < r->len && r->s[r->pos] == '|') {
            r->pos++;
            sb_puts(&r->out, " | ");
            continue;
        }
        break;
    }
    sb_putc(&r->out, ')');
    return 0;
}


/* The expression alone (JSON Schema's pattern embeds it). */
int
regex_to_gbnf_expr(const char *re, size_t len, sbuf *out, srt_err *err)
{
    rx r;

    memset(&r, 0, sizeof(r));
    r.s = re;
    r.len = len;
    r.err = err;
    if (r.len && r.s[0] == '^') {
        r.pos = 1;
    }
    if (rx_alt(&r) != 0) {
        free(r.out.p);
        return -1;
    }
    if (r.pos != r.len) {
        rfail(&r, "unbalanced ')'");
        free(r.out.p);
        return -1;
    }
    if (r.out.oom) {
        free(r.out.p);
        srt_err_set(err, "regex: out of memory");
        return -1;
    }
    sb_put(out, r.out.p, r.out.len);
    free(r.out.p);
    return 0;
}


int
srt_grammar_regex_to_gbnf(const char *re, size_t len, char **gbnf, srt_err *err)
{
    sbuf out = { NULL, 0, 0, 0 };

    *gbnf = NULL;
    sb_puts(&out, "root ::= ");
    if (regex_to_gbnf_expr(re, len, &out, err) != 0) {
        free(out.p);
        return SRT_ERROR;
    }
    sb_putc(&out, '\n');
    if (out.oom) {
        free(out.p);
        srt_err_set(err, "regex: out of memory");
        return SRT_ERROR;
    }
    *gbnf = out.p;
    return SRT_OK;
}
