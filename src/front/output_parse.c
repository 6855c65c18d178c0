/* Generated text -> reasoning, content, tool calls (srt/output_parse.h). One state machine over the
 * growing text: every byte is decided once (emitted or dropped), so what a stream sent never has to be
 * taken back; bytes that might still turn out to be a tag are held until they are known. */
#include "srt/output_parse.h"

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
    S_END
};

enum { NO, PARTIAL, MATCH };

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";

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
    while (i < len && is_ws(t[i]))
        i++;
    if (i >= len)
        return PARTIAL;
    if (t[i] != '{')
        return NO;
    *args = i;
    return MATCH;
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

void srt_outparse_init(srt_outparse *p, srt_tool_format tools, srt_reasoning_format reasoning, int think_open)
{
    memset(p, 0, sizeof *p);
    p->tools = tools;
    p->reasoning = reasoning;
    p->think_open = think_open;
    p->state = S_RSTART;
}

#define EMIT(ev, from, to)                                                                       \
    do {                                                                                         \
        if ((to) > (from) && sink(user, (ev), t + (from), (to) - (from)) != SRT_OK)             \
            return SRT_ERROR;                                                                    \
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
            r = lit_at(t, len, &i, THINK_OPEN);
            if (r == PARTIAL && !done)
                return SRT_OK;
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
                            || (p->tools == SRT_TOOLS_MISTRAL && t[i] == '['))) {
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
            if (p->tools != SRT_TOOLS_MISTRAL) {
                p->state = S_OBJ;
                break;
            }
            i = p->pos;
            r = lit_at(t, len, &i, "[");
            if (r == PARTIAL && !done)
                return SRT_OK;
            upto = r == PARTIAL ? len : p->pos;
            if (r != MATCH)
                goto revert;
            p->pos = i;
            p->state = S_OBJ;
            break;

        case S_OBJ:
            r = match_header(t, len, p->pos, &name, &name_len, &args);
            if (r == PARTIAL && !done)
                return SRT_OK;
            if (r == MATCH) {
                p->n_calls++;
                EMIT(SRT_OUT_CALL_BEGIN, name, name + name_len);
                p->pos = args;
                p->depth = p->in_str = p->esc = 0;
                p->state = S_ARGS;
                break;
            }
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
            if (p->state == S_ARGS) {
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
                r = lit_at(t, len, &i, "</tool_call>");
                if (r == PARTIAL && !done)
                    return SRT_OK;
                if (r == MATCH)
                    p->pos = i;
            } else {
                r = lit_at(t, len, &i, p->tools == SRT_TOOLS_LLAMA3 ? ";" : ",");
                if (r == PARTIAL && !done)
                    return SRT_OK;
                if (r == MATCH) {
                    p->block = p->pos;
                    p->pos = i;
                    p->state = S_OBJ;
                    break;
                }
                if (p->tools == SRT_TOOLS_MISTRAL && lit_at(t, len, &i, "]") == MATCH)
                    p->pos = i;
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
    int llama = src && (strstr(src, "<|python_tag|>") != NULL || strstr(src, "ipython") != NULL);

    *unambiguous = hermes + mistral + llama == 1;
    if (*unambiguous && mistral)
        return SRT_TOOLS_MISTRAL;
    if (*unambiguous && llama)
        return SRT_TOOLS_LLAMA3;
    return SRT_TOOLS_HERMES;
}

int srt_prompt_think_open(const char *prompt, size_t len)
{
    size_t n = sizeof THINK_OPEN - 1;

    while (len && is_ws(prompt[len - 1]))
        len--;
    return len >= n && memcmp(prompt + len - n, THINK_OPEN, n) == 0;
}
