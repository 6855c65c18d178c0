/* Generated text -> reasoning, content, tool calls (srt/output_parse.h). One state machine over the
 * growing text: every byte is decided once (emitted or dropped), so what a stream sent never has to be
 * taken back; bytes that might still turn out to be a tag are held until they are known. */
#include "srt/output_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_tree.h>

enum {
    S_RSTART,       /* before the reasoning decision */
    S_REASON,       /* inside <think> */
    S_CSTART,       /* start of the content (LLAMA3/MISTRAL: a bare call may start here) */
    S_CONTENT,
    S_TRIGGER,      /* after a call tag (MISTRAL: '[' follows) */
    S_OBJ,          /* at a call object */
    S_ARGS,         /* passing the arguments object through */
    S_OBJ_TAIL,     /* rest of the call object after its arguments */
    S_AFTER_CALL,   /* closing tag or separator */
    S_DSCALL,       /* at a DeepSeek V3 call: <｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n */
    S_PYCALL,       /* at a pythonic call: f(k=v, ...) */
    S_LIMIT,        /* max_calls are complete: the rest is ignored */
    S_END
};

enum { NO, PARTIAL, MATCH };

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";
static const char DS_CALLS_BEGIN[] = "<｜tool▁calls▁begin｜>", DS_CALLS_END[] = "<｜tool▁calls▁end｜>",
                  DS_CALL_BEGIN[] = "<｜tool▁call▁begin｜>", DS_CALL_END[] = "<｜tool▁call▁end｜>",
                  DS_SEP[] = "<｜tool▁sep｜>";
static const char PY_START[] = "<|python_start|>", PY_END[] = "<|python_end|>";

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static const char *trigger(srt_tool_format f)
{
    switch (f) {
    case SRT_TOOLS_HERMES:  return "<tool_call>";
    case SRT_TOOLS_LLAMA3:  return "<|python_tag|>";
    case SRT_TOOLS_MISTRAL: return "[TOOL_CALLS]";
    case SRT_TOOLS_DEEPSEEK_V3: return DS_CALLS_BEGIN;
    case SRT_TOOLS_PYTHONIC: return PY_START;
    default:                return NULL;
    }
}

/* lit at t[*i..] after optional whitespace; MATCH advances *i past it */
static int lit_at(const char *t, size_t len, size_t *i, const char *lit)
{
    size_t j = *i, n = strlen(lit), k;

    while (j < len && is_ws(t[j]))
        j++;
    for (k = 0; k < n; k++) {
        if (j + k >= len)
            return PARTIAL;
        if (t[j + k] != lit[k])
            return NO;
    }
    *i = j + n;
    return MATCH;
}

/* Length of the longest proper prefix of tag that t[from..len) ends with: bytes to hold back. */
static size_t held_prefix(const char *t, size_t from, size_t len, const char *tag)
{
    size_t n = strlen(tag), k;

    for (k = n - 1; k > 0; k--) {
        if (len - from >= k && memcmp(t + len - k, tag, k) == 0)
            return k;
    }
    return 0;
}

static const char *find(const char *t, size_t from, size_t len, const char *tag)
{
    size_t n = strlen(tag);

    for (size_t i = from; i + n <= len; i++) {
        if (t[i] == tag[0] && memcmp(t + i, tag, n) == 0)
            return t + i;
    }
    return NULL;
}

/* One byte of JSON; 1 when it closes the value that opened at depth 0. */
static int json_step(int *depth, int *in_str, int *esc, char c)
{
    if (*in_str) {
        if (*esc)
            *esc = 0;
        else if (c == '\\')
            *esc = 1;
        else if (c == '"')
            *in_str = 0;
        return 0;
    }
    if (c == '"')
        *in_str = 1;
    else if (c == '{' || c == '[')
        (*depth)++;
    else if ((c == '}' || c == ']') && --(*depth) == 0)
        return 1;
    return 0;
}

/* An arguments object at t[i] after whitespace: MATCH with *args at its '{'. */
static int object_at(const char *t, size_t len, size_t i, size_t *args)
{
    while (i < len && is_ws(t[i]))
        i++;
    if (i >= len)
        return PARTIAL;
    if (t[i] != '{')
        return NO;
    *args = i;
    return MATCH;
}

/* {"name": "N", "arguments"|"parameters": {  -- the form whose arguments can be passed through */
static int match_header(const char *t, size_t len, size_t from, size_t *name, size_t *name_len, size_t *args)
{
    size_t i = from, s;
    int r, r2;

    if ((r = lit_at(t, len, &i, "{")) != MATCH || (r = lit_at(t, len, &i, "\"name\"")) != MATCH
        || (r = lit_at(t, len, &i, ":")) != MATCH || (r = lit_at(t, len, &i, "\"")) != MATCH)
        return r;
    for (s = i; i < len && t[i] != '"'; i++) {
        if (t[i] == '\\' || (unsigned char)t[i] < 0x20)
            return NO;
    }
    if (i >= len)
        return PARTIAL;
    *name = s;
    *name_len = i - s;
    i++;
    if ((r = lit_at(t, len, &i, ",")) != MATCH)
        return r;
    size_t j = i;
    r = lit_at(t, len, &i, "\"arguments\"");
    if (r != MATCH) {
        r2 = lit_at(t, len, &j, "\"parameters\"");
        if (r2 == MATCH)
            i = j;
        else
            return r == PARTIAL || r2 == PARTIAL ? PARTIAL : NO;
    }
    if ((r = lit_at(t, len, &i, ":")) != MATCH)
        return r;
    return object_at(t, len, i, args);
}

/* End of the JSON value starting at t[i] (after whitespace), within [i, end); end when it does not close. */
static size_t value_end(const char *t, size_t i, size_t end)
{
    int depth = 0, in_str = 0, esc = 0;

    while (i < end && is_ws(t[i]))
        i++;
    if (i < end && (t[i] == '{' || t[i] == '[' || t[i] == '"')) {
        if (t[i] == '"') {
            for (i++; i < end; i++) {
                if (esc)
                    esc = 0;
                else if (t[i] == '\\')
                    esc = 1;
                else if (t[i] == '"')
                    return i + 1;
            }
            return end;
        }
        for (; i < end; i++) {
            if (json_step(&depth, &in_str, &esc, t[i]))
                return i + 1;
        }
        return end;
    }
    while (i < end && t[i] != ',' && t[i] != '}' && t[i] != ']' && !is_ws(t[i]))
        i++;
    return i;
}

/* The raw text of the top-level member "arguments" or "parameters" of the object t[from..end)
 * (already known to be valid JSON); 0 when there is none. */
static int raw_args(const char *t, size_t from, size_t end, size_t *vs, size_t *ve)
{
    size_t i = from + 1, ks, ke;

    for (;;) {
        while (i < end && (is_ws(t[i]) || t[i] == ','))
            i++;
        if (i >= end || t[i] != '"')
            return 0;
        ks = i + 1;
        ke = value_end(t, i, end) - 1;
        i = ke + 1;
        while (i < end && (is_ws(t[i]) || t[i] == ':'))
            i++;
        *vs = i;
        *ve = value_end(t, i, end);
        i = *ve;
        if ((ke - ks == 9 && memcmp(t + ks, "arguments", 9) == 0)
            || (ke - ks == 10 && memcmp(t + ks, "parameters", 10) == 0))
            return 1;
    }
}

/* A whole call object t[from..end): parsed, name and arguments reported (arguments given as a JSON
 * string are that string, others their raw text). *is_call = 0 when it is not a call. */
static int emit_parsed_call(srt_outparse *p, const char *t, size_t from, size_t end, srt_out_sink sink,
                            void *user, int *is_call)
{
    char *buf = malloc(end - from + 1), errbuf[64];
    yajl_val v, name = NULL, args = NULL;
    size_t vs = 0, ve = 0;
    int rc;

    *is_call = 0;
    if (buf == NULL)
        return SRT_ERROR;
    memcpy(buf, t + from, end - from);
    buf[end - from] = '\0';
    v = yajl_tree_parse(buf, errbuf, sizeof errbuf);
    free(buf);
    if (YAJL_IS_OBJECT(v)) {
        for (size_t k = 0; k < v->u.object.len; k++) {
            if (strcmp(v->u.object.keys[k], "name") == 0)
                name = v->u.object.values[k];
            else if (strcmp(v->u.object.keys[k], "arguments") == 0
                     || strcmp(v->u.object.keys[k], "parameters") == 0)
                args = v->u.object.values[k];
        }
    }
    if (!YAJL_IS_STRING(name)) {
        yajl_tree_free(v);
        return SRT_OK;
    }
    *is_call = 1;
    p->n_calls++;
    rc = sink(user, SRT_OUT_CALL_BEGIN, name->u.string, strlen(name->u.string));
    if (rc == SRT_OK && YAJL_IS_STRING(args))
        rc = sink(user, SRT_OUT_CALL_ARGS, args->u.string, strlen(args->u.string));
    else if (rc == SRT_OK && args && raw_args(t, from, end, &vs, &ve))
        rc = sink(user, SRT_OUT_CALL_ARGS, t + vs, ve - vs);
    else if (rc == SRT_OK)
        rc = sink(user, SRT_OUT_CALL_ARGS, "{}", 2);
    yajl_tree_free(v);
    return rc;
}

/* <｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{  -- a DeepSeek V3 call up to its arguments */
static int match_ds_header(const char *t, size_t len, size_t from, size_t *name, size_t *name_len,
                           size_t *args)
{
    size_t i = from, s;
    int r;

    if ((r = lit_at(t, len, &i, DS_CALL_BEGIN)) != MATCH || (r = lit_at(t, len, &i, "function")) != MATCH
        || (r = lit_at(t, len, &i, DS_SEP)) != MATCH)
        return r;
    for (s = i; i < len && t[i] != '\n'; i++) {
        if (t[i] == '<' || t[i] == '`' || t[i] == '"' || t[i] == '\\' || (unsigned char)t[i] < 0x20)
            return NO;
    }
    if (i >= len)
        return PARTIAL;
    if (i == s)
        return NO;
    *name = s;
    *name_len = i - s;
    if ((r = lit_at(t, len, &i, "```json")) != MATCH)
        return r;
    return object_at(t, len, i, args);
}

/* ---- pythonic calls: f(k=<Python literal>, ...) ---- */

typedef struct {
    char  *buf;
    size_t len, cap;
    int    oom;
} pybuf;

static void pb_put(pybuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2 + 64;
        char *nb = realloc(b->buf, cap);
        if (nb == NULL) {
            b->oom = 1;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

static int is_ident(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && c >= '0' && c <= '9');
}

static size_t skip_ws(const char *t, size_t i, size_t end)
{
    while (i < end && is_ws(t[i]))
        i++;
    return i;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A Python string literal ('...' or "...", the usual escapes) at t[*i] as a JSON string. */
static int py_string(const char *t, size_t *i, size_t end, pybuf *o)
{
    char q = t[*i], esc[8];
    size_t k;

    pb_put(o, "\"", 1);
    for (k = *i + 1; k < end && t[k] != q; k++) {
        unsigned char c = (unsigned char)t[k];
        if (c == '\n')
            return 0;
        if (c == '\\') {
            if (++k >= end)
                return 0;
            switch (t[k]) {
            case '\\': pb_put(o, "\\\\", 2); break;
            case '"':  pb_put(o, "\\\"", 2); break;
            case '\'': pb_put(o, "'", 1); break;
            case '/':  pb_put(o, "/", 1); break;
            case 'n':  pb_put(o, "\\n", 2); break;
            case 't':  pb_put(o, "\\t", 2); break;
            case 'r':  pb_put(o, "\\r", 2); break;
            case 'b':  pb_put(o, "\\b", 2); break;
            case 'f':  pb_put(o, "\\f", 2); break;
            case 'u':
                if (k + 4 >= end || hexval(t[k + 1]) < 0 || hexval(t[k + 2]) < 0 || hexval(t[k + 3]) < 0
                    || hexval(t[k + 4]) < 0)
                    return 0;
                pb_put(o, t + k - 1, 6);
                k += 4;
                break;
            case 'x':
                if (k + 2 >= end || hexval(t[k + 1]) < 0 || hexval(t[k + 2]) < 0)
                    return 0;
                snprintf(esc, sizeof esc, "\\u00%c%c", t[k + 1], t[k + 2]);
                pb_put(o, esc, 6);
                k += 2;
                break;
            default:
                return 0;
            }
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            pb_put(o, esc, 6);
        } else if (c == '"') {
            pb_put(o, "\\\"", 2);
        } else {
            pb_put(o, t + k, 1);
        }
    }
    if (k >= end)
        return 0;
    pb_put(o, "\"", 1);
    *i = k + 1;
    return 1;
}

/* A Python number: JSON's form, plus a leading '+' dropped and "1." written "1.0". */
static int py_number(const char *t, size_t *i, size_t end, pybuf *o)
{
    size_t k = *i, s;

    if (k < end && t[k] == '+')
        k++;
    s = k;
    if (k < end && t[k] == '-')
        k++;
    if (k >= end || t[k] < '0' || t[k] > '9')
        return 0;
    if (t[k] == '0' && k + 1 < end && t[k + 1] >= '0' && t[k + 1] <= '9')
        return 0;
    while (k < end && t[k] >= '0' && t[k] <= '9')
        k++;
    if (k < end && t[k] == '.') {
        k++;
        if (k >= end || t[k] < '0' || t[k] > '9') {
            pb_put(o, t + s, k - s);
            pb_put(o, "0", 1);
            s = k;
        }
        while (k < end && t[k] >= '0' && t[k] <= '9')
            k++;
    }
    if (k < end && (t[k] == 'e' || t[k] == 'E')) {
        k++;
        if (k < end && (t[k] == '+' || t[k] == '-'))
            k++;
        if (k >= end || t[k] < '0' || t[k] > '9')
            return 0;
        while (k < end && t[k] >= '0' && t[k] <= '9')
            k++;
    }
    pb_put(o, t + s, k - s);
    *i = k;
    return 1;
}

/* A Python literal at t[*i..end) (after whitespace) as JSON: str, int, float, True/False/None, list,
 * dict with string keys. */
static int py_value(const char *t, size_t *i, size_t end, pybuf *o, int depth)
{
    static const char *const words[][2] = { { "True", "true" }, { "False", "false" }, { "None", "null" } };
    size_t k = skip_ws(t, *i, end), n;
    char close;

    if (k >= end || depth > 64)
        return 0;
    if (t[k] == '\'' || t[k] == '"') {
        if (!py_string(t, &k, end, o))
            return 0;
        *i = k;
        return 1;
    }
    if (t[k] == '[' || t[k] == '{') {
        close = t[k] == '[' ? ']' : '}';
        pb_put(o, t + k, 1);
        k = skip_ws(t, k + 1, end);
        for (n = 0; k < end && t[k] != close; n++) {
            if (n)
                pb_put(o, ", ", 2);
            if (close == '}') {
                k = skip_ws(t, k, end);
                if (k >= end || (t[k] != '\'' && t[k] != '"') || !py_string(t, &k, end, o))
                    return 0;
                k = skip_ws(t, k, end);
                if (k >= end || t[k] != ':')
                    return 0;
                pb_put(o, ": ", 2);
                k++;
            }
            if (!py_value(t, &k, end, o, depth + 1))
                return 0;
            k = skip_ws(t, k, end);
            if (k < end && t[k] == ',')
                k = skip_ws(t, k + 1, end);
            else if (k < end && t[k] != close)
                return 0;
        }
        if (k >= end)
            return 0;
        pb_put(o, &close, 1);
        *i = k + 1;
        return 1;
    }
    for (n = 0; n < 3; n++) {
        size_t wl = strlen(words[n][0]);
        if (end - k >= wl && memcmp(t + k, words[n][0], wl) == 0
            && (k + wl == end || !is_ident(t[k + wl], 0))) {
            pb_put(o, words[n][1], strlen(words[n][1]));
            *i = k + wl;
            return 1;
        }
    }
    if (!py_number(t, &k, end, o))
        return 0;
    *i = k;
    return 1;
}

/* The end of the pythonic call that starts at t[from] (after whitespace): NO when it is not one,
 * PARTIAL when it has not closed yet, MATCH with *name, *name_len and *end (after the ')'). */
static int scan_py_call(const char *t, size_t len, size_t from, size_t *name, size_t *name_len, size_t *end)
{
    size_t i = skip_ws(t, from, len);
    int depth = 0;
    char q = 0;

    if (i >= len)
        return PARTIAL;
    if (!is_ident(t[i], 1))
        return NO;
    *name = i;
    while (i < len && (is_ident(t[i], 0) || t[i] == '.' || t[i] == '-'))
        i++;
    *name_len = i - *name;
    i = skip_ws(t, i, len);
    if (i >= len)
        return PARTIAL;
    if (t[i] != '(')
        return NO;
    for (; i < len; i++) {
        if (q) {
            if (t[i] == '\\')
                i++;
            else if (t[i] == q)
                q = 0;
            else if (t[i] == '\n')
                return NO;
        } else if (t[i] == '\'' || t[i] == '"') {
            q = t[i];
        } else if (t[i] == '(' || t[i] == '[' || t[i] == '{') {
            depth++;
        } else if (t[i] == ')' || t[i] == ']' || t[i] == '}') {
            if (--depth == 0) {
                if (t[i] != ')')
                    return NO;
                *end = i + 1;
                return MATCH;
            }
        }
    }
    return PARTIAL;
}

/* The keyword arguments of the call t[open..close] ('(' and ')') as a JSON object; 0 when they are
 * not all k=<literal>. *out is malloc'ed. */
static int py_args_json(const char *t, size_t open, size_t close, char **out)
{
    pybuf o = { 0 };
    size_t i = skip_ws(t, open + 1, close), k;
    int n = 0;

    pb_put(&o, "{", 1);
    while (i < close) {
        if (!is_ident(t[i], 1))
            goto fail;
        for (k = i; k < close && is_ident(t[k], 0); k++)
            ;
        if (n++)
            pb_put(&o, ", ", 2);
        pb_put(&o, "\"", 1);
        pb_put(&o, t + i, k - i);
        pb_put(&o, "\": ", 3);
        k = skip_ws(t, k, close);
        if (k >= close || t[k] != '=')
            goto fail;
        k++;
        if (!py_value(t, &k, close, &o, 0))
            goto fail;
        i = skip_ws(t, k, close);
        if (i < close) {
            if (t[i] != ',')
                goto fail;
            i = skip_ws(t, i + 1, close);
        }
    }
    pb_put(&o, "}", 1);
    if (o.oom)
        goto fail;
    *out = o.buf;
    return 1;

fail:
    free(o.buf);
    return 0;
}

void srt_outparse_init(srt_outparse *p, srt_tool_format tools, srt_reasoning_format reasoning, int think_open)
{
    memset(p, 0, sizeof *p);
    p->tools = tools;
    p->reasoning = reasoning;
    p->think_open = think_open;
    p->state = S_RSTART;
}

void srt_outparse_limit(srt_outparse *p, size_t max_calls)
{
    p->max_calls = max_calls;
}

int srt_outparse_limit_reached(const srt_outparse *p, size_t *end)
{
    if (p->state != S_LIMIT)
        return 0;
    *end = p->end_at;
    return 1;
}

#define EMIT(ev, from, to)                                                                       \
    do {                                                                                         \
        if ((to) > (from) && sink(user, (ev), t + (from), (to) - (from)) != SRT_OK)             \
            return SRT_ERROR;                                                                    \
    } while (0)

/* r: the literal lit at t[i..] after whitespace (MATCH advances i); wait for more text while it may be. */
#define LIT(i, lit)                                                                              \
    do {                                                                                         \
        r = lit_at(t, len, &(i), (lit));                                                         \
        if (r == PARTIAL && !done)                                                               \
            return SRT_OK;                                                                       \
    } while (0)

/* A block's fate from r: wait for more text, go on (MATCH), or revert it to content (the whole rest when
 * the text ended inside it). */
#define DECIDE(r)                                                                                \
    do {                                                                                         \
        if ((r) == PARTIAL && !done)                                                             \
            return SRT_OK;                                                                       \
        upto = (r) == PARTIAL ? len : p->pos;                                                    \
        if ((r) != MATCH)                                                                        \
            goto revert;                                                                         \
    } while (0)

int srt_outparse_feed(srt_outparse *p, const char *t, size_t len, int done, srt_out_sink sink, void *user)
{
    const char *tag = trigger(p->tools), *hit;
    size_t i, e, name = 0, name_len = 0, args = 0, upto = 0;
    int r, is_call;

    for (;;) {
        switch (p->state) {

        case S_RSTART:
            if (p->reasoning == SRT_REASONING_OFF) {
                p->state = S_CSTART;
                break;
            }
            i = p->pos;
            LIT(i, THINK_OPEN);
            if (r == MATCH && (p->reasoning == SRT_REASONING_DEEPSEEK_R1 || !p->think_open)) {
                p->pos = i;
                p->state = S_REASON;
            } else {
                p->state = p->reasoning == SRT_REASONING_DEEPSEEK_R1 || p->think_open ? S_REASON : S_CSTART;
            }
            break;

        case S_REASON:
            hit = find(t, p->pos, len, THINK_CLOSE);
            if (hit) {
                EMIT(SRT_OUT_REASONING, p->pos, (size_t)(hit - t));
                p->pos = (size_t)(hit - t) + sizeof THINK_CLOSE - 1;
                p->skip_ws = 1;
                p->state = S_CSTART;
                break;
            }
            e = done ? len : len - held_prefix(t, p->pos, len, THINK_CLOSE);
            EMIT(SRT_OUT_REASONING, p->pos, e);
            p->pos = e;
            if (done)
                p->state = S_END;
            return SRT_OK;

        case S_CSTART:
            for (i = p->pos; i < len && is_ws(t[i]); i++)
                ;
            if (i == len && !done)
                return SRT_OK;
            p->state = S_CONTENT;
            if (i < len && p->tools == SRT_TOOLS_MISTRAL && t[i] == '[') {
                /* the bare array, unless it is the tag itself */
                size_t j = i;
                r = lit_at(t, len, &j, tag);
                if (r == PARTIAL && !done) {
                    p->state = S_CSTART;
                    return SRT_OK;
                }
                if (r == MATCH)
                    break;
            }
            if (i < len && ((p->tools == SRT_TOOLS_LLAMA3 && t[i] == '{')
                            || ((p->tools == SRT_TOOLS_MISTRAL || p->tools == SRT_TOOLS_PYTHONIC)
                                && t[i] == '['))) {
                p->block = p->pos;
                p->pos = i;
                p->state = p->tools == SRT_TOOLS_LLAMA3 ? S_OBJ : S_TRIGGER;
            }
            break;

        case S_CONTENT:
            if (p->skip_ws) {
                while (p->pos < len && is_ws(t[p->pos]))
                    p->pos++;
                if (p->pos == len) {
                    if (done)
                        p->state = S_END;
                    return SRT_OK;
                }
                p->skip_ws = 0;
            }
            if (tag == NULL) {
                EMIT(SRT_OUT_CONTENT, p->pos, len);
                p->pos = len;
                if (done)
                    p->state = S_END;
                return SRT_OK;
            }
            hit = find(t, p->pos, len, tag);
            e = hit ? (size_t)(hit - t) : done ? len : len - held_prefix(t, p->pos, len, tag);
            i = e;
            if (hit || !done || p->n_calls) {
                /* whitespace before a call, or after the last one, is not content */
                while (e > p->pos && is_ws(t[e - 1]))
                    e--;
            }
            EMIT(SRT_OUT_CONTENT, p->pos, e);
            p->pos = e;
            if (hit) {
                p->block = e;
                p->pos = i + strlen(tag);
                p->state = S_TRIGGER;
                break;
            }
            if (done) {
                p->pos = len;
                p->state = S_END;
            }
            return SRT_OK;

        case S_TRIGGER:
            if (p->tools == SRT_TOOLS_DEEPSEEK_V3) {
                p->state = S_DSCALL;
                break;
            }
            if (p->tools != SRT_TOOLS_MISTRAL && p->tools != SRT_TOOLS_PYTHONIC) {
                p->state = S_OBJ;
                break;
            }
            i = p->pos;
            r = lit_at(t, len, &i, "[");
            DECIDE(r);
            p->pos = i;
            p->state = p->tools == SRT_TOOLS_PYTHONIC ? S_PYCALL : S_OBJ;
            break;

        case S_DSCALL:
            r = match_ds_header(t, len, p->pos, &name, &name_len, &args);
            DECIDE(r);
        pass_args:
            /* the call's name is known: its arguments are passed through as they come */
            p->n_calls++;
            EMIT(SRT_OUT_CALL_BEGIN, name, name + name_len);
            p->pos = args;
            p->depth = p->in_str = p->esc = 0;
            p->state = S_ARGS;
            break;

        case S_PYCALL:
            r = scan_py_call(t, len, p->pos, &name, &name_len, &e);
            DECIDE(r);
            {
                char *json = NULL;
                size_t open = name + name_len;

                while (t[open] != '(')
                    open++;
                if (!py_args_json(t, open, e - 1, &json))
                    goto revert;
                p->n_calls++;
                r = sink(user, SRT_OUT_CALL_BEGIN, t + name, name_len);
                if (r == SRT_OK)
                    r = sink(user, SRT_OUT_CALL_ARGS, json, strlen(json));
                free(json);
                if (r != SRT_OK)
                    return SRT_ERROR;
            }
            p->pos = e;
            p->state = S_AFTER_CALL;
            break;

        case S_OBJ:
            r = match_header(t, len, p->pos, &name, &name_len, &args);
            if (r == PARTIAL && !done)
                return SRT_OK;
            if (r == MATCH)
                goto pass_args;
            /* not the pass-through form: hold the object until it is whole */
            for (i = p->pos; i < len && is_ws(t[i]); i++)
                ;
            if (i == len && !done)
                return SRT_OK;
            upto = i == len ? len : p->pos;
            if (i == len || t[i] != '{')
                goto revert;
            {
                int depth = 0, in_str = 0, esc = 0;
                size_t k;
                for (k = i; k < len; k++) {
                    if (json_step(&depth, &in_str, &esc, t[k]))
                        break;
                }
                if (k == len) {
                    if (!done)
                        return SRT_OK;
                    upto = len;
                    goto revert;
                }
                if (emit_parsed_call(p, t, i, k + 1, sink, user, &is_call) != SRT_OK)
                    return SRT_ERROR;
                if (!is_call) {
                    EMIT(SRT_OUT_CONTENT, p->block, k + 1);
                    p->pos = k + 1;
                    p->state = S_CONTENT;
                    break;
                }
                p->pos = k + 1;
                p->state = S_AFTER_CALL;
            }
            break;

        case S_ARGS:
        case S_OBJ_TAIL:
            for (i = p->pos; i < len; i++) {
                if (json_step(&p->depth, &p->in_str, &p->esc, t[i]))
                    break;
            }
            e = i < len ? i + 1 : len;
            if (p->state == S_ARGS)
                EMIT(SRT_OUT_CALL_ARGS, p->pos, e);
            p->pos = e;
            if (i == len) {
                if (done)
                    p->state = S_END;
                return SRT_OK;
            }
            if (p->state == S_ARGS && p->tools != SRT_TOOLS_DEEPSEEK_V3) {
                /* the call object itself is still open */
                p->depth = 1;
                p->in_str = p->esc = 0;
                p->state = S_OBJ_TAIL;
            } else {
                p->state = S_AFTER_CALL;
            }
            break;

        case S_AFTER_CALL:
            i = p->pos;
            if (p->tools == SRT_TOOLS_HERMES) {
                LIT(i, "</tool_call>");
                if (r == MATCH)
                    p->pos = i;
            } else if (p->tools == SRT_TOOLS_DEEPSEEK_V3) {
                /* \n```<｜tool▁call▁end｜> */
                LIT(i, "```");
                if (r == MATCH)
                    LIT(i, DS_CALL_END);
                if (r == MATCH)
                    p->pos = i;
            }
            if (p->max_calls && p->n_calls >= p->max_calls) {
                /* a cut before text that an earlier decision looked at could change it */
                p->end_at = p->pos > p->horizon ? p->pos : p->horizon;
                p->state = S_LIMIT;
                return SRT_OK;
            }
            if (p->tools == SRT_TOOLS_DEEPSEEK_V3) {
                i = p->pos;
                LIT(i, DS_CALL_BEGIN);
                if (r == MATCH) {
                    p->block = p->pos;
                    p->state = S_DSCALL;
                    break;
                }
                i = p->pos;
                LIT(i, DS_CALLS_END);
                if (r == MATCH)
                    p->pos = i;
            } else if (p->tools != SRT_TOOLS_HERMES) {
                LIT(i, p->tools == SRT_TOOLS_LLAMA3 ? ";" : ",");
                if (r == MATCH) {
                    p->block = p->pos;
                    p->pos = i;
                    p->state = p->tools == SRT_TOOLS_PYTHONIC ? S_PYCALL : S_OBJ;
                    break;
                }
                if ((p->tools == SRT_TOOLS_MISTRAL || p->tools == SRT_TOOLS_PYTHONIC)
                    && lit_at(t, len, &i, "]") == MATCH) {
                    e = i;
                    if (p->tools == SRT_TOOLS_PYTHONIC) {
                        LIT(e, PY_END);
                        if (r != MATCH)
                            e = i;
                    }
                    p->pos = e;
                }
            }
            p->skip_ws = 1;
            p->state = S_CONTENT;
            break;

        default:
            return SRT_OK;
        }
        continue;

    revert:
        /* not a call after all: the block is content (up to the end when the text ended
           inside it), and the text goes on after it */
        EMIT(SRT_OUT_CONTENT, p->block, upto);
        p->pos = upto;
        if (len > p->horizon)
            p->horizon = len;
        p->state = S_CONTENT;
    }
}

int srt_outparse_in_reasoning(const srt_outparse *p)
{
    return p->state == S_RSTART || p->state == S_REASON;
}

srt_tool_format srt_tool_format_detect(const char *src, int *unambiguous)
{
    int hermes = src && strstr(src, "<tool_call>") != NULL;
    int mistral = src && strstr(src, "[TOOL_CALLS]") != NULL;
    int pythonic = src && (strstr(src, PY_START) != NULL || strstr(src, "[func_name1(") != NULL);
    /* Llama 4's pythonic templates also name the ipython role */
    int llama = src && !pythonic && (strstr(src, "<|python_tag|>") != NULL || strstr(src, "ipython") != NULL);
    int deepseek = src && strstr(src, DS_SEP) != NULL && strstr(src, "```json") != NULL;

    *unambiguous = hermes + mistral + llama + pythonic + deepseek == 1;
    if (*unambiguous && mistral)
        return SRT_TOOLS_MISTRAL;
    if (*unambiguous && llama)
        return SRT_TOOLS_LLAMA3;
    if (*unambiguous && pythonic)
        return SRT_TOOLS_PYTHONIC;
    if (*unambiguous && deepseek)
        return SRT_TOOLS_DEEPSEEK_V3;
    return SRT_TOOLS_HERMES;
}

int srt_prompt_think_open(const char *prompt, size_t len)
{
    size_t n = sizeof THINK_OPEN - 1;

    while (len && is_ws(prompt[len - 1]))
        len--;
    return len >= n && memcmp(prompt + len - n, THINK_OPEN, n) == 0;
}
