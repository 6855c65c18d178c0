/*
 * Request bodies: JSON (yajl) -> validated parameters -> prompt token ids.
 *
 * Every field OpenAI's chat and completions APIs define is checked for type and range;
 * errors name the field (OpenAI's "param"). Fields we do not know are ignored, as
 * OpenAI-compatible servers do. Chat messages go through the model's chat template
 * (src/template) and the tokenizer (src/tok), both loaded once per worker.
 */

#include "ngx_http_srt_module.h"

#include <math.h>


typedef struct {
    ngx_http_request_t    *r;
    ngx_http_srt_model_t  *m;
    ngx_http_srt_params_t *p;
    ngx_uint_t            *status;
    const char           **param;
    char                  *errbuf;
    size_t                 errlen;
} ngx_http_srt_parse_t;


static ngx_int_t
ngx_http_srt_fail(ngx_http_srt_parse_t *ps, ngx_uint_t status,
    const char *param, const char *fmt, ...)
{
    u_char   *last;
    va_list   args;

    va_start(args, fmt);
    last = ngx_vslprintf((u_char *) ps->errbuf,
                         (u_char *) ps->errbuf + ps->errlen - 1, fmt, args);
    va_end(args);

    *last = '\0';
    *ps->status = status;
    *ps->param = param;

    return NGX_ERROR;
}


static ngx_int_t
ngx_http_srt_get_number(ngx_http_srt_parse_t *ps, yajl_val v,
    const char *name, double min, double max, ngx_flag_t min_open,
    double *out)
{
    char    text[256];
    double  d;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_DECLINED;
    }

    if (!YAJL_IS_NUMBER(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name,
                                 "'%s' must be a number", name);
    }

    d = YAJL_IS_DOUBLE(v) ? YAJL_GET_DOUBLE(v) : (double) YAJL_GET_INTEGER(v);

    if (isnan(d) || d < min || d > max || (min_open && d <= min)) {
        /* nginx's printf has no %g */
        snprintf(text, sizeof(text), "'%s' must be %s %g and %g, got %g",
                 name, min_open ? "greater than" : "between", min, max, d);
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name, "%s", text);
    }

    *out = d;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_get_int(ngx_http_srt_parse_t *ps, yajl_val v, const char *name,
    long long min, long long max, long long *out)
{
    long long  n;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_DECLINED;
    }

    if (!YAJL_IS_INTEGER(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name,
                                 "'%s' must be an integer", name);
    }

    n = YAJL_GET_INTEGER(v);

    if (n < min || n > max) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name,
                                 "'%s' must be between %L and %L, got %L",
                                 name, min, max, n);
    }

    *out = n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_get_bool(ngx_http_srt_parse_t *ps, yajl_val v, const char *name,
    ngx_flag_t *out)
{
    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_DECLINED;
    }

    if (!YAJL_IS_TRUE(v) && !YAJL_IS_FALSE(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name,
                                 "'%s' must be a boolean", name);
    }

    *out = YAJL_IS_TRUE(v);

    return NGX_OK;
}


#define ngx_http_srt_check(rc)                                               \
    if ((rc) == NGX_ERROR) {                                                 \
        goto failed;                                                         \
    }


/*
 * Re-serialize a parsed value (messages pass to the template as they came).
 * Returns yajl_gen's first error: past its depth limit (128) yajl_gen
 * refuses to open containers and the text it builds is no longer JSON.
 */

yajl_gen_status
ngx_http_srt_gen_val(yajl_gen g, yajl_val v)
{
    size_t           i;
    yajl_gen_status  st;

    switch (v->type) {

    case yajl_t_string:
        return yajl_gen_string(g, (const unsigned char *) v->u.string,
                               ngx_strlen(v->u.string));

    case yajl_t_number:
        return yajl_gen_number(g, v->u.number.r, ngx_strlen(v->u.number.r));

    case yajl_t_object:
        st = yajl_gen_map_open(g);
        for (i = 0; st == yajl_gen_status_ok && i < v->u.object.len; i++) {
            st = yajl_gen_string(g,
                                 (const unsigned char *) v->u.object.keys[i],
                                 ngx_strlen(v->u.object.keys[i]));
            if (st == yajl_gen_status_ok) {
                st = ngx_http_srt_gen_val(g, v->u.object.values[i]);
            }
        }
        return st == yajl_gen_status_ok ? yajl_gen_map_close(g) : st;

    case yajl_t_array:
        st = yajl_gen_array_open(g);
        for (i = 0; st == yajl_gen_status_ok && i < v->u.array.len; i++) {
            st = ngx_http_srt_gen_val(g, v->u.array.values[i]);
        }
        return st == yajl_gen_status_ok ? yajl_gen_array_close(g) : st;

    case yajl_t_true:
        return yajl_gen_bool(g, 1);

    case yajl_t_false:
        return yajl_gen_bool(g, 0);

    default:
        return yajl_gen_null(g);
    }
}


static ngx_int_t
ngx_http_srt_gen_failed(ngx_http_srt_parse_t *ps, yajl_gen_status st,
    const char *param)
{
    if (st == yajl_max_depth_exceeded) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, param,
                                 "'%s' nests arrays or objects too deeply to "
                                 "pass to the chat template", param);
    }

    return NGX_ERROR;
}


static ngx_int_t
ngx_http_srt_messages(ngx_http_srt_parse_t *ps, yajl_val msgs, yajl_gen g)
{
    size_t       i, j, k;
    yajl_val     msg, role, content, part, type, text;
    const char  *key;
    ngx_uint_t   has_role;
    u_char      *buf, *p;
    size_t       total;
    yajl_gen_status  st;

    static const char *roles[] = { "system", "user", "assistant", "tool",
                                   "developer", "function", NULL };

    if (msgs == NULL || YAJL_IS_NULL(msgs)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "messages",
                                 "'messages' is required");
    }

    if (!YAJL_IS_ARRAY(msgs) || msgs->u.array.len == 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "messages",
                                 "'messages' must be a non-empty array");
    }

    yajl_gen_array_open(g);

    for (i = 0; i < msgs->u.array.len; i++) {
        msg = msgs->u.array.values[i];

        if (!YAJL_IS_OBJECT(msg)) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "messages",
                                     "'messages[%uz]' must be an object", i);
        }

        role = NULL;
        content = NULL;

        for (j = 0; j < msg->u.object.len; j++) {
            key = msg->u.object.keys[j];
            if (ngx_strcmp(key, "role") == 0) {
                role = msg->u.object.values[j];
            } else if (ngx_strcmp(key, "content") == 0) {
                content = msg->u.object.values[j];
            }
        }

        if (!YAJL_IS_STRING(role)) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "messages",
                                     "'messages[%uz].role' must be a string",
                                     i);
        }

        has_role = 0;
        for (k = 0; roles[k]; k++) {
            if (ngx_strcmp(role->u.string, roles[k]) == 0) {
                has_role = 1;
            }
        }

        if (!has_role) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "messages",
                                     "'messages[%uz].role' must be one of "
                                     "system, user, assistant, tool, "
                                     "developer; got \"%s\"",
                                     i, role->u.string);
        }

        if (content != NULL && !YAJL_IS_NULL(content)
            && !YAJL_IS_STRING(content) && !YAJL_IS_ARRAY(content))
        {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "messages",
                                     "'messages[%uz].content' must be a "
                                     "string, an array of text parts or "
                                     "null", i);
        }

        yajl_gen_map_open(g);

        for (j = 0; j < msg->u.object.len; j++) {
            key = msg->u.object.keys[j];
            if (ngx_strcmp(key, "content") == 0) {
                continue;
            }
            ngx_http_srt_gen_str(g, key);
            st = ngx_http_srt_gen_val(g, msg->u.object.values[j]);
            if (st != yajl_gen_status_ok) {
                return ngx_http_srt_gen_failed(ps, st, "messages");
            }
        }

        ngx_http_srt_gen_str(g, "content");

        if (content == NULL || YAJL_IS_NULL(content)) {
            yajl_gen_null(g);

        } else if (YAJL_IS_STRING(content)) {
            ngx_http_srt_gen_str(g, content->u.string);

        } else {
            /* text parts are joined, as servers for text-only models do */
            total = 0;

            for (k = 0; k < content->u.array.len; k++) {
                part = content->u.array.values[k];
                type = NULL;
                text = NULL;

                if (YAJL_IS_OBJECT(part)) {
                    for (j = 0; j < part->u.object.len; j++) {
                        if (ngx_strcmp(part->u.object.keys[j], "type") == 0) {
                            type = part->u.object.values[j];
                        } else if (ngx_strcmp(part->u.object.keys[j], "text")
                                   == 0)
                        {
                            text = part->u.object.values[j];
                        }
                    }
                }

                if (!YAJL_IS_STRING(type)
                    || ngx_strcmp(type->u.string, "text") != 0
                    || !YAJL_IS_STRING(text))
                {
                    return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                             "messages",
                                             "'messages[%uz].content[%uz]' "
                                             "must be {\"type\": \"text\", "
                                             "\"text\": \"...\"}; this model "
                                             "takes text only", i, k);
                }

                total += ngx_strlen(text->u.string);
            }

            buf = ngx_pnalloc(ps->r->pool, total + 1);
            if (buf == NULL) {
                return NGX_ERROR;
            }

            p = buf;
            for (k = 0; k < content->u.array.len; k++) {
                part = content->u.array.values[k];
                for (j = 0; j < part->u.object.len; j++) {
                    if (ngx_strcmp(part->u.object.keys[j], "text") == 0) {
                        p = ngx_cpymem(p,
                                     part->u.object.values[j]->u.string,
                                     ngx_strlen(
                                       part->u.object.values[j]->u.string));
                    }
                }
            }
            *p = '\0';

            ngx_http_srt_gen_str(g, (char *) buf);
        }

        yajl_gen_map_close(g);
    }

    yajl_gen_array_close(g);

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_stop(ngx_http_srt_parse_t *ps, yajl_val v)
{
    size_t                  i, n;
    yajl_val                s;
    ngx_http_srt_params_t  *p = ps->p;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_OK;
    }

    if (YAJL_IS_STRING(v)) {
        n = 1;

    } else if (YAJL_IS_ARRAY(v)) {
        n = v->u.array.len;

    } else {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "stop",
                                 "'stop' must be a string or an array of "
                                 "strings");
    }

    if (n > NGX_HTTP_SRT_MAX_STOP) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "stop",
                                 "'stop' may hold at most %d strings",
                                 NGX_HTTP_SRT_MAX_STOP);
    }

    for (i = 0; i < n; i++) {
        s = YAJL_IS_STRING(v) ? v : v->u.array.values[i];

        if (!YAJL_IS_STRING(s)) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "stop",
                                     "'stop[%uz]' must be a string", i);
        }

        if (s->u.string[0] == '\0') {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "stop",
                                     "'stop' strings must not be empty");
        }

        p->stop[p->n_stop].len = ngx_strlen(s->u.string);
        p->stop[p->n_stop].data = ngx_pnalloc(ps->r->pool,
                                              p->stop[p->n_stop].len);
        if (p->stop[p->n_stop].data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(p->stop[p->n_stop].data, s->u.string,
                   p->stop[p->n_stop].len);

        if (p->stop[p->n_stop].len > p->max_stop_len) {
            p->max_stop_len = p->stop[p->n_stop].len;
        }

        p->n_stop++;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_token_ids(ngx_http_srt_parse_t *ps, yajl_val v, const char *name,
    size_t max, size_t vocab, int32_t *ids, size_t *n)
{
    size_t     i;
    yajl_val   e;
    long long  id;

    if (!YAJL_IS_ARRAY(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name,
                                 "'%s' must be an array of token ids", name);
    }

    if (v->u.array.len > max) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name,
                                 "'%s' may hold at most %uz token ids",
                                 name, max);
    }

    for (i = 0; i < v->u.array.len; i++) {
        e = v->u.array.values[i];

        if (!YAJL_IS_INTEGER(e)) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name,
                                     "'%s[%uz]' must be an integer token id",
                                     name, i);
        }

        id = YAJL_GET_INTEGER(e);

        if (id < 0 || (size_t) id >= vocab) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name,
                                     "'%s[%uz]' = %L is not a token id of "
                                     "this model (vocabulary size %uz)",
                                     name, i, id, vocab);
        }

        ids[i] = (int32_t) id;
    }

    *n = v->u.array.len;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_encode(ngx_http_srt_parse_t *ps, const char *text, size_t len,
    unsigned flags)
{
    srt_err   err;
    int32_t  *ids;
    size_t    n;

    if (srt_tokenizer_encode_alloc(ps->m->tok, text, len, flags, &ids, &n,
                                   &err)
        != SRT_OK)
    {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "Cannot tokenize the prompt: %s", err.msg);
    }

    ps->p->prompt = ngx_palloc(ps->r->pool, (n ? n : 1) * sizeof(int32_t));
    if (ps->p->prompt == NULL) {
        free(ids);
        return NGX_ERROR;
    }

    ngx_memcpy(ps->p->prompt, ids, n * sizeof(int32_t));
    ps->p->n_prompt = n;
    free(ids);

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_render_chat(ngx_http_srt_parse_t *ps, yajl_val messages,
    yajl_val tools)
{
    char                  *text;
    size_t                 text_len, ctx_len;
    srt_err                err;
    yajl_gen               g;
    ngx_int_t              rc;
    yajl_gen_status        st;
    const unsigned char   *ctx_json;
    ngx_http_srt_model_t  *m = ps->m;

    if (m->tmpl == NULL) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "messages",
                                 "Model \"%V\" has no chat template; use "
                                 "/v1/completions or set srt_chat_template",
                                 &m->name);
    }

    g = yajl_gen_alloc(NULL);
    if (g == NULL) {
        return NGX_ERROR;
    }

    yajl_gen_map_open(g);
    ngx_http_srt_gen_str(g, "messages");

    rc = ngx_http_srt_messages(ps, messages, g);
    if (rc != NGX_OK) {
        yajl_gen_free(g);
        return rc;
    }

    (void) srt_chat_context_gen_common(g, m->bos_token, m->eos_token);
    ngx_http_srt_gen_str(g, "tools");
    if (tools && !YAJL_IS_NULL(tools)) {
        st = ngx_http_srt_gen_val(g, tools);
        if (st != yajl_gen_status_ok) {
            yajl_gen_free(g);
            return ngx_http_srt_gen_failed(ps, st, "tools");
        }
    } else {
        yajl_gen_null(g);
    }
    ngx_http_srt_gen_str(g, "documents");
    yajl_gen_null(g);
    yajl_gen_map_close(g);

    yajl_gen_get_buf(g, &ctx_json, &ctx_len);

    if (srt_chat_template_render(m->tmpl, (const char *) ctx_json, ctx_len,
                                 &text, &text_len, &err)
        != SRT_OK)
    {
        yajl_gen_free(g);
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "messages",
                                 "The chat template rejected the messages: "
                                 "%s", err.msg);
    }

    yajl_gen_free(g);

    /* the template writes the special tokens itself: no BOS added again */
    rc = ngx_http_srt_encode(ps, text, text_len, SRT_TOK_PARSE_SPECIAL);

    srt_chat_template_free_output(text);

    return rc;
}


static ngx_int_t
ngx_http_srt_prompt(ngx_http_srt_parse_t *ps, yajl_val v, size_t max,
    size_t vocab)
{
    yajl_val  e;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "prompt",
                                 "'prompt' is required");
    }

    if (YAJL_IS_STRING(v)) {
        return ngx_http_srt_encode(ps, v->u.string, ngx_strlen(v->u.string),
                                   SRT_TOK_PARSE_SPECIAL|SRT_TOK_ADD_SPECIAL);
    }

    if (!YAJL_IS_ARRAY(v) || v->u.array.len == 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "prompt",
                                 "'prompt' must be a string, an array of "
                                 "token ids, or a one-element array of "
                                 "either");
    }

    e = v->u.array.values[0];

    if (YAJL_IS_STRING(e) || YAJL_IS_ARRAY(e)) {
        if (v->u.array.len != 1) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "prompt",
                                     "batched prompts are not supported: "
                                     "send one prompt per request");
        }

        if (YAJL_IS_STRING(e)) {
            return ngx_http_srt_encode(ps, e->u.string,
                                       ngx_strlen(e->u.string),
                                       SRT_TOK_PARSE_SPECIAL
                                       |SRT_TOK_ADD_SPECIAL);
        }

        v = e;
        if (v->u.array.len == 0) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "prompt",
                                     "'prompt' must not be empty");
        }
    }

    ps->p->prompt = ngx_palloc(ps->r->pool,
                               v->u.array.len * sizeof(int32_t));
    if (ps->p->prompt == NULL) {
        return NGX_ERROR;
    }

    /* the context check that follows gives the clearer error for long prompts */
    return ngx_http_srt_token_ids(ps, v, "prompt", 1 << 24, vocab,
                                  ps->p->prompt, &ps->p->n_prompt);
}


/*
 * Fields other servers define that this one does not implement. Each would
 * change the output, so a request that uses one gets a 400 naming it rather
 * than a 200 that ignores it ("never say yes to what you do not do"). A field
 * at its no-op value (null, false, an empty list, the default) is let through:
 * clients send defaults. Fields that change nothing (user, metadata, store,
 * service_tier, ...) are ignored; conf/README.md lists both sets.
 */

typedef enum {
    NGX_HTTP_SRT_UNSUP_SET = 0,     /* any value but null */
    NGX_HTTP_SRT_UNSUP_TRUE,        /* true (false is the default) */
    NGX_HTTP_SRT_UNSUP_FALSE,       /* false (true is the default) */
    NGX_HTTP_SRT_UNSUP_NONEMPTY     /* a non-empty string, array or object */
} ngx_http_srt_unsup_e;


typedef struct {
    const char            *name;
    ngx_http_srt_unsup_e   when;
} ngx_http_srt_unsup_t;


static const ngx_http_srt_unsup_t  ngx_http_srt_unsupported[] = {
    /* OpenAI */
    { "functions",                 NGX_HTTP_SRT_UNSUP_NONEMPTY },
    { "audio",                     NGX_HTTP_SRT_UNSUP_SET },
    { "reasoning_effort",          NGX_HTTP_SRT_UNSUP_SET },
    { "verbosity",                 NGX_HTTP_SRT_UNSUP_SET },
    { "web_search_options",        NGX_HTTP_SRT_UNSUP_SET },
    { "suffix",                    NGX_HTTP_SRT_UNSUP_NONEMPTY },

    /* SGLang */
    { "regex",                     NGX_HTTP_SRT_UNSUP_SET },
    { "ebnf",                      NGX_HTTP_SRT_UNSUP_SET },
    { "json_schema",               NGX_HTTP_SRT_UNSUP_SET },
    { "structural_tag",            NGX_HTTP_SRT_UNSUP_SET },
    { "lora_path",                 NGX_HTTP_SRT_UNSUP_SET },
    { "custom_logit_processor",    NGX_HTTP_SRT_UNSUP_SET },
    { "custom_params",             NGX_HTTP_SRT_UNSUP_SET },
    { "session_params",            NGX_HTTP_SRT_UNSUP_SET },
    { "chat_template_kwargs",      NGX_HTTP_SRT_UNSUP_NONEMPTY },
    { "continue_final_message",    NGX_HTTP_SRT_UNSUP_TRUE },
    { "return_hidden_states",      NGX_HTTP_SRT_UNSUP_TRUE },
    { "no_stop_trim",              NGX_HTTP_SRT_UNSUP_TRUE },
    { "stop_regex",                NGX_HTTP_SRT_UNSUP_NONEMPTY },
    { "skip_special_tokens",       NGX_HTTP_SRT_UNSUP_FALSE },
    { "spaces_between_special_tokens", NGX_HTTP_SRT_UNSUP_FALSE },

    /* vLLM */
    { "guided_json",               NGX_HTTP_SRT_UNSUP_SET },
    { "guided_regex",              NGX_HTTP_SRT_UNSUP_SET },
    { "guided_choice",             NGX_HTTP_SRT_UNSUP_SET },
    { "guided_grammar",            NGX_HTTP_SRT_UNSUP_SET },
    { "structured_outputs",        NGX_HTTP_SRT_UNSUP_SET },
    { "use_beam_search",           NGX_HTTP_SRT_UNSUP_TRUE },
    { "length_penalty",            NGX_HTTP_SRT_UNSUP_SET },
    { "include_stop_str_in_output", NGX_HTTP_SRT_UNSUP_TRUE },
    { "truncate_prompt_tokens",    NGX_HTTP_SRT_UNSUP_SET },
    { "prompt_logprobs",           NGX_HTTP_SRT_UNSUP_SET },
    { "allowed_token_ids",         NGX_HTTP_SRT_UNSUP_SET },
    { "bad_words",                 NGX_HTTP_SRT_UNSUP_NONEMPTY },
    { "add_generation_prompt",     NGX_HTTP_SRT_UNSUP_FALSE },
    { "add_special_tokens",        NGX_HTTP_SRT_UNSUP_SET },
    { "documents",                 NGX_HTTP_SRT_UNSUP_NONEMPTY },
    { "chat_template",             NGX_HTTP_SRT_UNSUP_SET },
    { "logits_processors",         NGX_HTTP_SRT_UNSUP_NONEMPTY },

    /* llama.cpp server */
    { "grammar",                   NGX_HTTP_SRT_UNSUP_NONEMPTY },
    { "typical_p",                 NGX_HTTP_SRT_UNSUP_SET },
    { "mirostat",                  NGX_HTTP_SRT_UNSUP_SET },
    { "dry_multiplier",            NGX_HTTP_SRT_UNSUP_SET },
    { "xtc_probability",           NGX_HTTP_SRT_UNSUP_SET },
    { "dynatemp_range",            NGX_HTTP_SRT_UNSUP_SET },
    { "n_probs",                   NGX_HTTP_SRT_UNSUP_SET },
    { "samplers",                  NGX_HTTP_SRT_UNSUP_SET },
    { NULL, 0 }
};


static ngx_flag_t
ngx_http_srt_is_empty(yajl_val v)
{
    return v == NULL || YAJL_IS_NULL(v)
           || (YAJL_IS_STRING(v) && v->u.string[0] == '\0')
           || (YAJL_IS_ARRAY(v) && v->u.array.len == 0)
           || (YAJL_IS_OBJECT(v) && v->u.object.len == 0);
}


static ngx_int_t
ngx_http_srt_unsupported_field(ngx_http_srt_parse_t *ps, const char *key,
    yajl_val v)
{
    ngx_flag_t                   hit;
    const ngx_http_srt_unsup_t  *u;

    for (u = ngx_http_srt_unsupported; u->name; u++) {
        if (ngx_strcmp(key, u->name) == 0) {
            break;
        }
    }

    if (u->name == NULL || v == NULL || YAJL_IS_NULL(v)) {
        return NGX_OK;
    }

    switch (u->when) {
    case NGX_HTTP_SRT_UNSUP_TRUE:
        hit = !YAJL_IS_FALSE(v);
        break;
    case NGX_HTTP_SRT_UNSUP_FALSE:
        hit = !YAJL_IS_TRUE(v);
        break;
    case NGX_HTTP_SRT_UNSUP_NONEMPTY:
        hit = !ngx_http_srt_is_empty(v);
        break;
    default:
        hit = 1;
    }

    if (!hit) {
        return NGX_OK;
    }

    return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, u->name,
                             "'%s' is not supported by this server", u->name);
}


/*
 * Structured outputs: response_format json_object / json_schema, SGLang's regex, ebnf and
 * json_schema. One at most; the spec is compiled here once to refuse a bad one with a 400
 * naming the keyword or position (the scheduler compiles it again, against the vocabulary,
 * and caches it). Tools the model may call are not served yet and are refused by name.
 */

static ngx_int_t
ngx_http_srt_grammar_set(ngx_http_srt_parse_t *ps, const char *param,
    srt_grammar_kind kind, const char *text, size_t len)
{
    int                 rc;
    srt_err             err;
    srt_grammar        *g = NULL;
    srt_grammar_spec   *gs = &ps->p->rq.grammar;

    if (gs->kind != SRT_GRAMMAR_NONE) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, param,
                                 "only one of 'response_format' (json), "
                                 "'json_schema', 'regex' and 'ebnf' may be "
                                 "given");
    }

    if (len >= SRT_REQ_MAX_GRAMMAR) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, param,
                                 "'%s' may be at most %d bytes", param,
                                 SRT_REQ_MAX_GRAMMAR - 1);
    }

    err.msg[0] = '\0';

    switch (kind) {
    case SRT_GRAMMAR_JSON_SCHEMA:
        rc = srt_grammar_compile_json_schema(NULL, text, len, NULL, &g, &err);
        break;
    case SRT_GRAMMAR_REGEX:
        rc = srt_grammar_compile_regex(NULL, text, len, &g, &err);
        break;
    case SRT_GRAMMAR_GBNF:
        rc = srt_grammar_compile_gbnf(NULL, text, len, &g, &err);
        break;
    default:
        rc = SRT_OK;
    }

    srt_grammar_free(g);

    if (rc != SRT_OK) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, param,
                                 "Invalid '%s': %s", param, err.msg);
    }

    gs->kind = kind;
    gs->len = (int32_t) len;
    ngx_memcpy(gs->text, text, len);
    gs->text[len] = '\0';

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_grammar_string(ngx_http_srt_parse_t *ps, yajl_val v,
    const char *param, srt_grammar_kind kind)
{
    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_OK;
    }

    if (!YAJL_IS_STRING(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, param,
                                 "'%s' must be a string", param);
    }

    return ngx_http_srt_grammar_set(ps, param, kind, v->u.string,
                                    ngx_strlen(v->u.string));
}


static yajl_val
ngx_http_srt_member(yajl_val obj, const char *key)
{
    size_t  i;

    if (!YAJL_IS_OBJECT(obj)) {
        return NULL;
    }

    for (i = 0; i < obj->u.object.len; i++) {
        if (ngx_strcmp(obj->u.object.keys[i], key) == 0) {
            return obj->u.object.values[i];
        }
    }

    return NULL;
}


static ngx_int_t
ngx_http_srt_response_format(ngx_http_srt_parse_t *ps, yajl_val fmt)
{
    size_t          len;
    yajl_gen        g;
    yajl_val        type, js, schema;
    ngx_int_t       rc;
    const u_char   *buf;

    if (fmt == NULL || YAJL_IS_NULL(fmt)) {
        return NGX_OK;
    }

    type = ngx_http_srt_member(fmt, "type");

    if (!YAJL_IS_STRING(type)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "response_format",
                                 "'response_format' must be an object "
                                 "with a string 'type'");
    }

    if (ngx_strcmp(type->u.string, "text") == 0) {
        return NGX_OK;
    }

    if (ngx_strcmp(type->u.string, "json_object") == 0) {
        return ngx_http_srt_grammar_set(ps, "response_format",
                                        SRT_GRAMMAR_JSON_OBJECT, "", 0);
    }

    if (ngx_strcmp(type->u.string, "json_schema") != 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "response_format",
                                 "'response_format' of type \"%s\" is "
                                 "not supported by this server; use text, "
                                 "json_object or json_schema",
                                 type->u.string);
    }

    js = ngx_http_srt_member(fmt, "json_schema");
    schema = ngx_http_srt_member(js, "schema");

    if (!YAJL_IS_OBJECT(js)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "response_format",
                                 "'response_format.json_schema' must be an "
                                 "object");
    }

    if (schema == NULL || YAJL_IS_NULL(schema)) {
        /* OpenAI: a json_schema without a schema constrains to any JSON */
        return ngx_http_srt_grammar_set(ps, "response_format",
                                        SRT_GRAMMAR_JSON_SCHEMA, "{}", 2);
    }

    if (!YAJL_IS_OBJECT(schema) && !YAJL_IS_TRUE(schema)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "response_format",
                                 "'response_format.json_schema.schema' must "
                                 "be an object");
    }

    g = yajl_gen_alloc(NULL);
    if (g == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_srt_gen_val(g, schema) != yajl_gen_status_ok) {
        yajl_gen_free(g);
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "response_format",
                                 "'response_format.json_schema.schema' "
                                 "cannot be serialized");
    }

    yajl_gen_get_buf(g, &buf, &len);
    rc = ngx_http_srt_grammar_set(ps, "response_format",
                                  SRT_GRAMMAR_JSON_SCHEMA,
                                  (const char *) buf, len);
    yajl_gen_free(g);

    return rc;
}


/*
 * Tools. The model calls them in the Hermes / Qwen2.5 format its chat template teaches:
 *   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 * "auto" leaves the output free and parses such blocks out of it (response side);
 * "required" and a named function constrain the output to calls of the allowed
 * functions, each "arguments" following the function's parameter schema, by a
 * grammar built from those schemas. "none" offers no call.
 */

static ngx_int_t
ngx_http_srt_tools_grammar(ngx_http_srt_parse_t *ps, yajl_val tools,
    const char *only, ngx_flag_t parallel)
{
    size_t          i, len, n = 0;
    char           *gbnf, *body;
    yajl_val        t, fn, name, params;
    yajl_gen        g;
    srt_err         err;
    ngx_int_t       rc;
    const u_char   *buf;

    g = yajl_gen_alloc(NULL);
    if (g == NULL) {
        return NGX_ERROR;
    }

    /* {"anyOf": [{"type": "object", "properties": {"name": {"const": f},
       "arguments": PARAMS}, "required": ["name", "arguments"]}, ...]} */
    yajl_gen_map_open(g);
    ngx_http_srt_gen_str(g, "anyOf");
    yajl_gen_array_open(g);

    for (i = 0; i < tools->u.array.len; i++) {
        t = tools->u.array.values[i];
        fn = ngx_http_srt_member(t, "function");
        name = ngx_http_srt_member(fn, "name");
        params = ngx_http_srt_member(fn, "parameters");

        if (!YAJL_IS_STRING(name)) {
            yajl_gen_free(g);
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                     "'tools[%uz].function.name' must be a "
                                     "string", i);
        }

        if (only && ngx_strcmp(name->u.string, only) != 0) {
            continue;
        }

        n++;
        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "type");
        ngx_http_srt_gen_str(g, "object");
        ngx_http_srt_gen_str(g, "properties");
        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "name");
        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "const");
        ngx_http_srt_gen_str(g, name->u.string);
        yajl_gen_map_close(g);
        ngx_http_srt_gen_str(g, "arguments");
        if (params && YAJL_IS_OBJECT(params) && params->u.object.len) {
            if (ngx_http_srt_gen_val(g, params) != yajl_gen_status_ok) {
                yajl_gen_free(g);
                return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                         "'tools[%uz].function.parameters' "
                                         "cannot be serialized", i);
            }
        } else {
            yajl_gen_map_open(g);
            ngx_http_srt_gen_str(g, "type");
            ngx_http_srt_gen_str(g, "object");
            yajl_gen_map_close(g);
        }
        yajl_gen_map_close(g);
        ngx_http_srt_gen_str(g, "required");
        yajl_gen_array_open(g);
        ngx_http_srt_gen_str(g, "name");
        ngx_http_srt_gen_str(g, "arguments");
        yajl_gen_array_close(g);
        yajl_gen_map_close(g);
    }

    yajl_gen_array_close(g);
    yajl_gen_map_close(g);

    if (n == 0) {
        yajl_gen_free(g);
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tool_choice",
                                 "'tool_choice' names function \"%s\", "
                                 "which is not in 'tools'", only);
    }

    yajl_gen_get_buf(g, &buf, &len);

    err.msg[0] = '\0';
    if (srt_grammar_json_schema_to_gbnf((const char *) buf, len, NULL, &body,
                                        &err)
        != SRT_OK)
    {
        yajl_gen_free(g);
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                 "Invalid 'tools' parameters: %s", err.msg);
    }

    yajl_gen_free(g);

    /* the schema's grammar starts "root ::= ": it becomes the call's JSON */
    len = ngx_strlen(body);
    gbnf = ngx_pnalloc(ps->r->pool, len + 256);
    if (gbnf == NULL) {
        free(body);
        return NGX_ERROR;
    }

    ngx_sprintf((u_char *) gbnf,
                "root ::= call%s\n"
                "call ::= \"<tool_call>\\n\" call_json \"\\n</tool_call>\"\n"
                "call_json ::= %s%Z",
                parallel ? " (\"\\n\" call)*" : "", body + 9);
    free(body);

    rc = ngx_http_srt_grammar_set(ps, "tools", SRT_GRAMMAR_GBNF, gbnf,
                                  ngx_strlen(gbnf));

    return rc;
}


static ngx_int_t
ngx_http_srt_output_format(ngx_http_srt_parse_t *ps, yajl_val fmt,
    yajl_val tools, yajl_val choice, yajl_val fcall, yajl_val parallel)
{
    yajl_val     fn, name;
    ngx_flag_t   has_tools, par;
    ngx_int_t    rc;

    rc = ngx_http_srt_response_format(ps, fmt);
    if (rc != NGX_OK) {
        return rc;
    }

    if (tools && !YAJL_IS_NULL(tools) && !YAJL_IS_ARRAY(tools)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                 "'tools' must be an array");
    }

    has_tools = tools && YAJL_IS_ARRAY(tools) && tools->u.array.len > 0;

    if (has_tools && ps->p->endpoint != NGX_HTTP_SRT_EP_CHAT) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                 "'tools' are for /v1/chat/completions");
    }

    par = 1;
    if (parallel && !YAJL_IS_NULL(parallel)) {
        if (!YAJL_IS_TRUE(parallel) && !YAJL_IS_FALSE(parallel)) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                     "parallel_tool_calls",
                                     "'parallel_tool_calls' must be a "
                                     "boolean");
        }
        par = YAJL_IS_TRUE(parallel);
    }

    if (fcall && !YAJL_IS_NULL(fcall)
        && !(YAJL_IS_STRING(fcall) && ngx_strcmp(fcall->u.string, "none") == 0))
    {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "function_call",
                                 "'function_call' other than \"none\" is not "
                                 "supported by this server; use 'tools'");
    }

    if (choice == NULL || YAJL_IS_NULL(choice)) {
        /* OpenAI's default: "auto" with tools, "none" without */
        ps->p->tools = has_tools;
        return NGX_OK;
    }

    if (YAJL_IS_STRING(choice)) {
        if (ngx_strcmp(choice->u.string, "none") == 0) {
            return NGX_OK;
        }

        if (ngx_strcmp(choice->u.string, "auto") == 0) {
            ps->p->tools = has_tools;
            return NGX_OK;
        }

        if (ngx_strcmp(choice->u.string, "required") == 0) {
            if (!has_tools) {
                return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                         "tool_choice",
                                         "'tool_choice' \"required\" needs "
                                         "'tools'");
            }
            ps->p->tools = 1;
            return ngx_http_srt_tools_grammar(ps, tools, NULL, par);
        }
    }

    fn = ngx_http_srt_member(choice, "function");
    name = ngx_http_srt_member(fn, "name");

    if (!YAJL_IS_STRING(name)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tool_choice",
                                 "'tool_choice' must be \"none\", \"auto\", "
                                 "\"required\" or {\"type\": \"function\", "
                                 "\"function\": {\"name\": ...}}");
    }

    if (!has_tools) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tool_choice",
                                 "'tool_choice' names a function but there "
                                 "are no 'tools'");
    }

    ps->p->tools = 1;

    return ngx_http_srt_tools_grammar(ps, tools, name->u.string, 0);
}

/*
 * Returned activations (src/hooks/README.md, "Activations over the API"):
 * "return_activations": [{"module": "model.layers.N", "reduce": "last" |
 * "mean" | "all", "dtype": "f32" | "f16"}], in locations with
 * srt_max_activation_bytes. The module's range is checked against the
 * model's layer count, and the size against the limit, once the prompt and
 * max_tokens are known (ngx_http_srt_activations_bound).
 */

static ngx_int_t
ngx_http_srt_activations(ngx_http_srt_parse_t *ps, yajl_val f)
{
    size_t                    i, j;
    yajl_val                  e, v;
    const char               *key;
    srt_act_spec             *sp;
    srt_request_activations  *ra;
    ngx_http_srt_loc_conf_t  *slcf;

    ra = &ps->p->rq.acts;
    ngx_memzero(ra, sizeof(srt_request_activations));

    if (f == NULL || YAJL_IS_NULL(f)
        || (YAJL_IS_ARRAY(f) && f->u.array.len == 0))
    {
        return NGX_OK;
    }

    slcf = ngx_http_get_module_loc_conf(ps->r, ngx_http_srt_module);

    if (slcf->max_act_bytes == 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                 "return_activations",
                                 "'return_activations' is not enabled here: "
                                 "the location has no "
                                 "srt_max_activation_bytes");
    }

    if (!YAJL_IS_ARRAY(f)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                 "return_activations",
                                 "'return_activations' must be an array of "
                                 "{\"module\": ..., \"reduce\": ..., "
                                 "\"dtype\": ...} objects");
    }

    if (f->u.array.len > SRT_REQ_MAX_ACTIVATIONS) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                 "return_activations",
                                 "'return_activations' has %uz entries; "
                                 "at most %d", f->u.array.len,
                                 SRT_REQ_MAX_ACTIVATIONS);
    }

    for (i = 0; i < f->u.array.len; i++) {
        e = f->u.array.values[i];
        sp = &ra->spec[i];
        sp->reduce = -1;
        sp->dtype = -1;

        if (!YAJL_IS_OBJECT(e)) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                     "return_activations",
                                     "return_activations[%uz] must be an "
                                     "object", i);
        }

        for (j = 0; j < e->u.object.len; j++) {
            key = e->u.object.keys[j];
            v = e->u.object.values[j];

            if (ngx_strcmp(key, "module") == 0) {
                if (!YAJL_IS_STRING(v)
                    || ngx_strlen(v->u.string) >= SRT_REQ_ACT_MODULE_MAX
                    || srt_act_module_index(v->u.string, 1 << 24) < 0)
                {
                    return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                   "return_activations",
                                   "return_activations[%uz].module must be "
                                   "\"model.embed_tokens\", "
                                   "\"model.layers.N\" or \"model.norm\"", i);
                }
                ngx_cpystrn((u_char *) sp->module, (u_char *) v->u.string,
                            SRT_REQ_ACT_MODULE_MAX);

            } else if (ngx_strcmp(key, "reduce") == 0) {
                if (YAJL_IS_STRING(v)) {
                    sp->reduce = ngx_strcmp(v->u.string, "last") == 0
                                 ? SRT_ACT_LAST
                                 : ngx_strcmp(v->u.string, "mean") == 0
                                 ? SRT_ACT_MEAN
                                 : ngx_strcmp(v->u.string, "all") == 0
                                 ? SRT_ACT_ALL : -1;
                }
                if (sp->reduce < 0) {
                    return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                   "return_activations",
                                   "return_activations[%uz].reduce must be "
                                   "\"last\", \"mean\" or \"all\"", i);
                }

            } else if (ngx_strcmp(key, "dtype") == 0) {
                if (YAJL_IS_STRING(v)) {
                    sp->dtype = ngx_strcmp(v->u.string, "f32") == 0
                                ? SRT_ACT_F32
                                : ngx_strcmp(v->u.string, "f16") == 0
                                ? SRT_ACT_F16 : -1;
                }
                if (sp->dtype < 0) {
                    return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                   "return_activations",
                                   "return_activations[%uz].dtype must be "
                                   "\"f32\" or \"f16\"", i);
                }

            } else {
                return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                         "return_activations",
                                         "return_activations[%uz] has an "
                                         "unknown field '%s' (module, "
                                         "reduce, dtype)", i, key);
            }
        }

        if (sp->module[0] == '\0') {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                     "return_activations",
                                     "return_activations[%uz].module is "
                                     "required", i);
        }

        /* defaults: the last position, in f32 */
        if (sp->reduce < 0) {
            sp->reduce = SRT_ACT_LAST;
        }
        if (sp->dtype < 0) {
            sp->dtype = SRT_ACT_F32;
        }

        ra->n = (int32_t) (i + 1);
    }

    return NGX_OK;
}


/*
 * With the prompt and max_tokens known: every module in the model's range,
 * and the size of every choice's tensors (rows of "all": the prompt's
 * positions and every generated token's but the last) within
 * srt_max_activation_bytes, else 413.
 */

static ngx_int_t
ngx_http_srt_activations_bound(ngx_http_srt_parse_t *ps,
    srt_chan_model_info *info, size_t max_new)
{
    int32_t                   i;
    uint64_t                  one, total;
    srt_request_activations  *ra;
    ngx_http_srt_loc_conf_t  *slcf;

    ra = &ps->p->rq.acts;

    if (ra->n == 0) {
        return NGX_OK;
    }

    if (srt_chan_model_info_get(ps->m->chan, info) != SRT_OK
        || info->hidden_size <= 0 || info->n_layers <= 0)
    {
        return NGX_DECLINED;
    }

    for (i = 0; i < ra->n; i++) {
        if (srt_act_module_index(ra->spec[i].module, info->n_layers) < 0) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                     "return_activations",
                                     "return_activations[%d].module: this "
                                     "model has model.layers.0 to "
                                     "model.layers.%d, not \"%s\"", (int) i,
                                     (int) info->n_layers - 1,
                                     ra->spec[i].module);
        }
    }

    slcf = ngx_http_get_module_loc_conf(ps->r, ngx_http_srt_module);

    one = srt_request_activations_bytes(ra,
                                        (int64_t) (ps->p->n_prompt + max_new
                                                   - 1),
                                        info->hidden_size);
    total = one * ps->p->n;

    if (total > (uint64_t) slcf->max_act_bytes) {
        return ngx_http_srt_fail(ps, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                 "return_activations",
                                 "'return_activations' may need %uL bytes "
                                 "(%uz choices, %uz prompt tokens, "
                                 "max_tokens %uz, hidden size %d); this "
                                 "location allows %uz "
                                 "(srt_max_activation_bytes)",
                                 total, ps->p->n, ps->p->n_prompt, max_new,
                                 (int) info->hidden_size,
                                 slcf->max_act_bytes);
    }

    return NGX_OK;
}


/*
 * Per-request hooks and cache isolation (src/hooks/README.md):
 * "hooks": [{"name": N, "config": {...}}] selects hook specs marked per_request,
 * only those the location lists in srt_request_hooks; "cache_salt" keeps the
 * request's prefix cache apart from other tenants'. Both set rq.cache_ns: a
 * hash of the salt and the selection, so no cached prefix computed under
 * another selection, config or salt is ever served.
 */

static uint64_t
ngx_http_srt_fnv(uint64_t h, const char *s, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        h ^= (u_char) s[i];
        h *= 0x100000001b3ULL;
    }

    h ^= 0xff;          /* field separator: ("ab","c") != ("a","bc") */
    h *= 0x100000001b3ULL;

    return h;
}


static ngx_int_t
ngx_http_srt_request_hooks(ngx_http_srt_parse_t *ps, yajl_val f_hooks,
    yajl_val f_salt)
{
    size_t                    i, j, k, off, len;
    uint64_t                  h;
    yajl_val                  e, name, config;
    yajl_gen                  g;
    const char               *key;
    ngx_str_t                *allowed;
    ngx_uint_t                a, ok;
    const unsigned char      *buf;
    yajl_gen_status           st;
    srt_request_hooks        *rh;
    ngx_http_srt_loc_conf_t  *slcf;

    rh = &ps->p->rq.hooks;
    ngx_memzero(rh, sizeof(srt_request_hooks));
    ps->p->rq.cache_ns = 0;
    h = 0xcbf29ce484222325ULL;

    if (f_salt && !YAJL_IS_NULL(f_salt)) {
        if (!YAJL_IS_STRING(f_salt) || f_salt->u.string[0] == '\0') {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "cache_salt",
                                     "'cache_salt' must be a non-empty "
                                     "string");
        }

        h = ngx_http_srt_fnv(h, "salt", 4);
        h = ngx_http_srt_fnv(h, f_salt->u.string,
                             ngx_strlen(f_salt->u.string));
        ps->p->rq.cache_ns = 1;
    }

    if (f_hooks == NULL || YAJL_IS_NULL(f_hooks)
        || (YAJL_IS_ARRAY(f_hooks) && f_hooks->u.array.len == 0))
    {
        goto done;
    }

    slcf = ngx_http_get_module_loc_conf(ps->r, ngx_http_srt_module);

    if (slcf->request_hooks == NULL) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                 "'hooks' is not enabled here: the location "
                                 "has no srt_request_hooks");
    }

    if (!YAJL_IS_ARRAY(f_hooks)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                 "'hooks' must be an array of {\"name\": ..., "
                                 "\"config\": {...}} objects");
    }

    if (f_hooks->u.array.len > SRT_REQ_MAX_HOOKS) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                 "'hooks' selects %uz hooks; at most %d",
                                 f_hooks->u.array.len, SRT_REQ_MAX_HOOKS);
    }

    allowed = slcf->request_hooks->elts;
    off = 0;

    for (i = 0; i < f_hooks->u.array.len; i++) {
        e = f_hooks->u.array.values[i];
        name = config = NULL;

        if (!YAJL_IS_OBJECT(e)) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                     "hooks[%uz] must be an object with a "
                                     "'name'", i);
        }

        for (j = 0; j < e->u.object.len; j++) {
            key = e->u.object.keys[j];

            if (ngx_strcmp(key, "name") == 0) {
                name = e->u.object.values[j];

            } else if (ngx_strcmp(key, "config") == 0) {
                config = e->u.object.values[j];

            } else {
                return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                         "hooks[%uz] has an unknown field "
                                         "'%s' (name, config)", i, key);
            }
        }

        if (!YAJL_IS_STRING(name) || name->u.string[0] == '\0'
            || ngx_strlen(name->u.string) >= SRT_REQ_HOOK_NAME_MAX)
        {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                     "hooks[%uz].name must be a hook spec "
                                     "name (a string of 1 to %d bytes)", i,
                                     SRT_REQ_HOOK_NAME_MAX - 1);
        }

        ok = 0;
        for (a = 0; a < slcf->request_hooks->nelts; a++) {
            if (allowed[a].len == ngx_strlen(name->u.string)
                && ngx_strncmp(allowed[a].data, name->u.string,
                               allowed[a].len) == 0)
            {
                ok = 1;
            }
        }

        if (!ok) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                     "hook '%s' may not be selected here "
                                     "(srt_request_hooks)", name->u.string);
        }

        for (k = 0; k < i; k++) {
            if (ngx_strcmp(rh->name[k], name->u.string) == 0) {
                return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                         "hook '%s' is selected twice",
                                         name->u.string);
            }
        }

        ngx_cpystrn((u_char *) rh->name[i], (u_char *) name->u.string,
                    SRT_REQ_HOOK_NAME_MAX);
        h = ngx_http_srt_fnv(h, rh->name[i], ngx_strlen(rh->name[i]));

        if (config && !YAJL_IS_NULL(config)) {
            if (!YAJL_IS_OBJECT(config)) {
                return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                         "hooks[%uz].config must be an "
                                         "object", i);
            }

            g = yajl_gen_alloc(NULL);
            if (g == NULL) {
                return NGX_ERROR;
            }

            st = ngx_http_srt_gen_val(g, config);
            if (st != yajl_gen_status_ok) {
                yajl_gen_free(g);
                return ngx_http_srt_gen_failed(ps, st, "hooks");
            }

            yajl_gen_get_buf(g, &buf, &len);

            if (len + 1 > SRT_REQ_HOOK_CONFIG_MAX - off) {
                yajl_gen_free(g);
                return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "hooks",
                                         "the hooks' configs take more than "
                                         "%d bytes of JSON",
                                         SRT_REQ_HOOK_CONFIG_MAX - 1);
            }

            ngx_memcpy(rh->config_text + off, buf, len);
            rh->config_text[off + len] = '\0';
            rh->config_off[i] = (uint32_t) off;
            rh->config_len[i] = (uint32_t) len;
            h = ngx_http_srt_fnv(h, (const char *) buf, len);
            off += len + 1;
            yajl_gen_free(g);

        } else {
            h = ngx_http_srt_fnv(h, "{}", 2);
        }

        rh->n = (int32_t) (i + 1);
    }

done:

    if (rh->n > 0 || ps->p->rq.cache_ns) {
        ps->p->rq.cache_ns = h ? h : 1;   /* 0 is the shared namespace */
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_srt_parse_request(ngx_http_request_t *r, ngx_http_srt_model_t *m,
    u_char *body, size_t len, ngx_http_srt_params_t *p, ngx_uint_t *status,
    const char **param, char *errbuf, size_t errlen)
{
    char                  yerr[256], *nl;
    size_t                i, n, vocab, ctx_len, max_new;
    double                d;
    yajl_val              root, v;
    yajl_val              f_model, f_messages, f_prompt, f_max_tokens,
                          f_max_completion, f_temperature, f_top_p, f_top_k,
                          f_min_p, f_n, f_stop, f_stop_ids, f_seed, f_freq,
                          f_pres, f_rep, f_bias, f_ignore_eos, f_min_tokens,
                          f_logprobs, f_top_logprobs, f_user, f_stream,
                          f_stream_options, f_tools, f_echo, f_best_of,
                          f_format, f_tool_choice, f_fcall, f_modalities,
                          f_regex, f_ebnf, f_json_schema, f_parallel,
                          f_hooks, f_salt, f_acts;
    ngx_int_t             rc;
    long long             ll;
    ngx_flag_t            flag = 0;
    const char           *key;
    srt_chan_model_info   info;
    ngx_http_srt_parse_t  ps;
    int32_t               stop_ids[SRT_REQ_MAX_STOP_IDS];
    int                   state;

    ps.r = r;
    ps.m = m;
    ps.p = p;
    ps.status = status;
    ps.param = param;
    ps.errbuf = errbuf;
    ps.errlen = errlen;

    root = NULL;

    if (len == 0) {
        return ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "The request body is empty; expected a JSON "
                                 "object");
    }

    if (ngx_strlen(body) != len) {
        return ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "Invalid JSON: the body contains a NUL "
                                 "byte");
    }

    /* yajl_tree_free and the walks below recurse once per level */
    if (srt_json_depth((const char *) body, len) > SRT_JSON_MAX_DEPTH) {
        return ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "The request body nests arrays or objects "
                                 "deeper than %d levels", SRT_JSON_MAX_DEPTH);
    }

    yerr[0] = '\0';
    root = yajl_tree_parse((const char *) body, yerr, sizeof(yerr));

    if (root == NULL) {
        nl = ngx_strchr(yerr, '\n');
        if (nl) {
            *nl = '\0';
        }
        return ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "Invalid JSON in the request body: %s",
                                 yerr[0] ? yerr : "parse error");
    }

    if (!YAJL_IS_OBJECT(root)) {
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, NULL,
                               "The request body must be a JSON object");
        goto failed;
    }

    f_model = f_messages = f_prompt = f_max_tokens = f_max_completion = NULL;
    f_temperature = f_top_p = f_top_k = f_min_p = f_n = f_stop = NULL;
    f_stop_ids = f_seed = f_freq = f_pres = f_rep = f_bias = NULL;
    f_ignore_eos = f_min_tokens = f_logprobs = f_top_logprobs = NULL;
    f_user = f_stream = f_stream_options = f_tools = f_echo = NULL;
    f_best_of = f_format = f_tool_choice = f_fcall = f_modalities = NULL;
    f_regex = f_ebnf = f_json_schema = f_parallel = NULL;
    f_hooks = f_salt = f_acts = NULL;

    for (i = 0; i < root->u.object.len; i++) {
        key = root->u.object.keys[i];
        v = root->u.object.values[i];

#define field(name, var)  if (ngx_strcmp(key, name) == 0) { var = v; continue; }
        field("model", f_model);
        field("messages", f_messages);
        field("prompt", f_prompt);
        field("max_tokens", f_max_tokens);
        field("max_completion_tokens", f_max_completion);
        field("temperature", f_temperature);
        field("top_p", f_top_p);
        field("top_k", f_top_k);
        field("min_p", f_min_p);
        field("n", f_n);
        field("stop", f_stop);
        field("stop_token_ids", f_stop_ids);
        field("seed", f_seed);
        field("frequency_penalty", f_freq);
        field("presence_penalty", f_pres);
        field("repetition_penalty", f_rep);
        field("logit_bias", f_bias);
        field("ignore_eos", f_ignore_eos);
        field("min_tokens", f_min_tokens);
        field("logprobs", f_logprobs);
        field("top_logprobs", f_top_logprobs);
        field("user", f_user);
        field("stream", f_stream);
        field("stream_options", f_stream_options);
        field("tools", f_tools);
        field("echo", f_echo);
        field("best_of", f_best_of);
        field("response_format", f_format);
        field("tool_choice", f_tool_choice);
        field("function_call", f_fcall);
        field("modalities", f_modalities);
        field("regex", f_regex);
        field("ebnf", f_ebnf);
        field("json_schema", f_json_schema);
        field("hooks", f_hooks);
        field("cache_salt", f_salt);
        field("return_activations", f_acts);
        field("parallel_tool_calls", f_parallel);
#undef field

        if (ngx_http_srt_unsupported_field(&ps, key, v) != NGX_OK) {
            rc = NGX_ERROR;
            goto failed;
        }
    }

    rc = ngx_http_srt_output_format(&ps, f_format, f_tools, f_tool_choice,
                                    f_fcall, f_parallel);
    ngx_http_srt_check(rc);
    rc = ngx_http_srt_grammar_string(&ps, f_json_schema, "json_schema",
                                     SRT_GRAMMAR_JSON_SCHEMA);
    ngx_http_srt_check(rc);
    rc = ngx_http_srt_grammar_string(&ps, f_regex, "regex", SRT_GRAMMAR_REGEX);
    ngx_http_srt_check(rc);
    rc = ngx_http_srt_grammar_string(&ps, f_ebnf, "ebnf", SRT_GRAMMAR_GBNF);
    ngx_http_srt_check(rc);

    rc = ngx_http_srt_request_hooks(&ps, f_hooks, f_salt);
    ngx_http_srt_check(rc);

    rc = ngx_http_srt_activations(&ps, f_acts);
    ngx_http_srt_check(rc);

    if (f_modalities && !YAJL_IS_NULL(f_modalities)
        && !(YAJL_IS_ARRAY(f_modalities) && f_modalities->u.array.len == 1
             && YAJL_IS_STRING(f_modalities->u.array.values[0])
             && ngx_strcmp(f_modalities->u.array.values[0]->u.string, "text")
                == 0))
    {
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, "modalities",
                               "'modalities' other than [\"text\"] is not "
                               "supported by this server");
        goto failed;
    }

    /* model */

    if (f_model && !YAJL_IS_NULL(f_model)) {
        if (!YAJL_IS_STRING(f_model)) {
            rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, "model",
                                   "'model' must be a string");
            goto failed;
        }

        n = ngx_strlen(f_model->u.string);

        if (n != m->name.len
            || ngx_strncmp(f_model->u.string, m->name.data, n) != 0)
        {
            rc = ngx_http_srt_fail(&ps, NGX_HTTP_NOT_FOUND, "model",
                                   "The model `%s` does not exist; this "
                                   "endpoint serves `%V`",
                                   f_model->u.string, &m->name);
            goto failed;
        }
    }

    /* sampling */

    p->rq.sampling.temperature = 1.0f;
    p->rq.sampling.top_p = 1.0f;
    p->rq.sampling.top_k = -1;
    p->rq.sampling.repetition_penalty = 1.0f;
    p->n = 1;

    rc = ngx_http_srt_get_number(&ps, f_temperature, "temperature", 0, 2, 0,
                                 &d);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.temperature = (float) d;
    }

    rc = ngx_http_srt_get_number(&ps, f_top_p, "top_p", 0, 1, 1, &d);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.top_p = (float) d;
    }

    rc = ngx_http_srt_get_int(&ps, f_top_k, "top_k", -1, 1 << 30, &ll);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.top_k = ll == 0 ? -1 : (int32_t) ll;
    }

    rc = ngx_http_srt_get_number(&ps, f_min_p, "min_p", 0, 1, 0, &d);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.min_p = (float) d;
    }

    rc = ngx_http_srt_get_number(&ps, f_freq, "frequency_penalty", -2, 2, 0,
                                 &d);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.frequency_penalty = (float) d;
    }

    rc = ngx_http_srt_get_number(&ps, f_pres, "presence_penalty", -2, 2, 0,
                                 &d);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.presence_penalty = (float) d;
    }

    rc = ngx_http_srt_get_number(&ps, f_rep, "repetition_penalty", 0, 2, 1,
                                 &d);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.repetition_penalty = (float) d;
    }

    rc = ngx_http_srt_get_int(&ps, f_n, "n", 1, NGX_HTTP_SRT_MAX_N, &ll);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->n = (ngx_uint_t) ll;
    }

    rc = ngx_http_srt_get_int(&ps, f_best_of, "best_of", 1, 1, &ll);
    ngx_http_srt_check(rc);

    rc = ngx_http_srt_get_int(&ps, f_seed, "seed", LLONG_MIN, LLONG_MAX, &ll);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.has_seed = 1;
        p->rq.sampling.seed = (uint64_t) ll;
    }

    rc = ngx_http_srt_get_bool(&ps, f_ignore_eos, "ignore_eos", &flag);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.ignore_eos = (int32_t) flag;
    }

    rc = ngx_http_srt_get_bool(&ps, f_stream, "stream", &flag);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->stream = flag;
    }

    rc = ngx_http_srt_get_bool(&ps, f_echo, "echo", &flag);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK && flag) {
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, "echo",
                               "'echo' is not supported");
        goto failed;
    }

    if (f_stream_options && !YAJL_IS_NULL(f_stream_options)) {
        if (!YAJL_IS_OBJECT(f_stream_options)) {
            rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST,
                                   "stream_options",
                                   "'stream_options' must be an object");
            goto failed;
        }

        for (i = 0; i < f_stream_options->u.object.len; i++) {
            if (ngx_strcmp(f_stream_options->u.object.keys[i],
                           "include_usage") == 0)
            {
                rc = ngx_http_srt_get_bool(&ps,
                                       f_stream_options->u.object.values[i],
                                       "stream_options.include_usage", &flag);
                ngx_http_srt_check(rc);
                if (rc == NGX_OK) {
                    p->include_usage = flag;
                }
            }
        }
    }

    if (f_user && !YAJL_IS_NULL(f_user) && !YAJL_IS_STRING(f_user)) {
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, "user",
                               "'user' must be a string");
        goto failed;
    }

    /* logprobs: a boolean for chat, a count for completions */

    if (p->endpoint == NGX_HTTP_SRT_EP_CHAT) {
        rc = ngx_http_srt_get_bool(&ps, f_logprobs, "logprobs", &flag);
        ngx_http_srt_check(rc);
        if (rc == NGX_OK) {
            p->logprobs = flag;
        }

        rc = ngx_http_srt_get_int(&ps, f_top_logprobs, "top_logprobs", 0,
                                  SRT_REQ_MAX_TOP_LOGPROBS, &ll);
        ngx_http_srt_check(rc);
        if (rc == NGX_OK) {
            if (!p->logprobs && ll > 0) {
                rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST,
                                       "top_logprobs",
                                       "'top_logprobs' needs 'logprobs' set "
                                       "to true");
                goto failed;
            }
            p->rq.sampling.top_logprobs = (int32_t) ll;
        }

    } else {
        rc = ngx_http_srt_get_int(&ps, f_logprobs, "logprobs", 0, 5, &ll);
        ngx_http_srt_check(rc);
        if (rc == NGX_OK) {
            p->logprobs = 1;
            p->rq.sampling.top_logprobs = (int32_t) ll;
        }
    }

    p->rq.sampling.logprobs = (int32_t) p->logprobs;

    rc = ngx_http_srt_stop(&ps, f_stop);
    ngx_http_srt_check(rc);

    if (p->n_stop > 0 && p->rq.acts.n > 0) {
        /* a stop string ends the text in the worker, after the scheduler ran
         * past it: the rows would not match the text returned */
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, "stop",
                               "'stop' strings cannot be combined with "
                               "'return_activations' (stop_token_ids can)");
        goto failed;
    }

    if (m->load_error.len || m->tok == NULL) {
        rc = NGX_DECLINED;
        goto failed;
    }

    vocab = srt_tokenizer_vocab_size(m->tok);
    if (srt_chan_model_info_get(m->chan, &info) == SRT_OK
        && (size_t) info.vocab_size > vocab)
    {
        vocab = info.vocab_size;
    }

    if (f_stop_ids && !YAJL_IS_NULL(f_stop_ids)) {
        rc = ngx_http_srt_token_ids(&ps, f_stop_ids, "stop_token_ids",
                                    SRT_REQ_MAX_STOP_IDS, vocab, stop_ids,
                                    &n);
        ngx_http_srt_check(rc);
        ngx_memcpy(p->rq.sampling.stop_ids, stop_ids, n * sizeof(int32_t));
        p->rq.sampling.n_stop_ids = (int32_t) n;
    }

    if (f_bias && !YAJL_IS_NULL(f_bias)) {
        if (!YAJL_IS_OBJECT(f_bias)) {
            rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, "logit_bias",
                                   "'logit_bias' must be an object mapping "
                                   "token ids to numbers");
            goto failed;
        }

        if (f_bias->u.object.len > SRT_REQ_MAX_LOGIT_BIAS) {
            rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, "logit_bias",
                                   "'logit_bias' may hold at most %d entries",
                                   SRT_REQ_MAX_LOGIT_BIAS);
            goto failed;
        }

        for (i = 0; i < f_bias->u.object.len; i++) {
            key = f_bias->u.object.keys[i];
            ll = ngx_atoi((u_char *) key, ngx_strlen(key));

            if (ll == NGX_ERROR || (size_t) ll >= vocab) {
                rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST,
                                       "logit_bias",
                                       "'logit_bias' key \"%s\" is not a "
                                       "token id of this model", key);
                goto failed;
            }

            rc = ngx_http_srt_get_number(&ps, f_bias->u.object.values[i],
                                         "logit_bias", -100, 100, 0, &d);
            ngx_http_srt_check(rc);
            if (rc != NGX_OK) {
                rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST,
                                       "logit_bias",
                                       "'logit_bias' values must be numbers");
                goto failed;
            }

            p->rq.sampling.logit_bias_ids[i] = (int32_t) ll;
            p->rq.sampling.logit_bias[i] = (float) d;
        }

        p->rq.sampling.n_logit_bias = (int32_t) f_bias->u.object.len;
    }

    /* types and ranges first: a bad request is a 400 even while the model loads */

    rc = ngx_http_srt_get_int(&ps, f_max_tokens, "max_tokens", 1,
                              NGX_MAX_INT32_VALUE, &ll);
    ngx_http_srt_check(rc);
    rc = ngx_http_srt_get_int(&ps, f_max_completion, "max_completion_tokens",
                              1, NGX_MAX_INT32_VALUE, &ll);
    ngx_http_srt_check(rc);
    rc = ngx_http_srt_get_int(&ps, f_min_tokens, "min_tokens", 0,
                              NGX_MAX_INT32_VALUE, &ll);
    ngx_http_srt_check(rc);

    /* a grammar decides where the output may end: EOS cannot be held back */
    if (p->rq.grammar.kind != SRT_GRAMMAR_NONE
        && (p->rq.sampling.ignore_eos || (rc == NGX_OK && ll > 0)))
    {
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST,
                               p->rq.sampling.ignore_eos ? "ignore_eos"
                                                         : "min_tokens",
                               "'%s' cannot be combined with structured "
                               "output (the grammar decides where the "
                               "output ends)",
                               p->rq.sampling.ignore_eos ? "ignore_eos"
                                                         : "min_tokens");
        goto failed;
    }

    if (p->endpoint == NGX_HTTP_SRT_EP_COMPLETIONS
        && (f_prompt == NULL || YAJL_IS_NULL(f_prompt)))
    {
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, "prompt",
                               "'prompt' is required");
        goto failed;
    }

    if (p->endpoint == NGX_HTTP_SRT_EP_CHAT
        && (f_messages == NULL || !YAJL_IS_ARRAY(f_messages)
            || f_messages->u.array.len == 0))
    {
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST, "messages",
                               f_messages == NULL || YAJL_IS_NULL(f_messages)
                               ? "'messages' is required"
                               : "'messages' must be a non-empty array");
        goto failed;
    }

    /* the scheduler must be there before we spend time on the prompt */

    state = srt_chan_sched_state_get(m->chan, NULL, 0);
    if (ngx_process == NGX_PROCESS_SINGLE
        || (state != SRT_CHAN_SCHED_READY && state != SRT_CHAN_SCHED_HANDOVER))
    {
        rc = NGX_DECLINED;
        goto failed;
    }

    ctx_len = (size_t) srt_chan_get_config(m->chan)->slot_tokens;
    if (srt_chan_model_info_get(m->chan, &info) == SRT_OK
        && info.context_length > 0 && (size_t) info.context_length < ctx_len)
    {
        ctx_len = info.context_length;
    }

    if (p->endpoint == NGX_HTTP_SRT_EP_CHAT) {
        rc = ngx_http_srt_render_chat(&ps, f_messages, f_tools);
    } else {
        rc = ngx_http_srt_prompt(&ps, f_prompt, ctx_len, vocab);
    }

    if (rc != NGX_OK) {
        goto failed;
    }

    if (p->n_prompt == 0) {
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST,
                               p->endpoint == NGX_HTTP_SRT_EP_CHAT
                               ? "messages" : "prompt",
                               "The prompt is empty");
        goto failed;
    }

    if (p->n_prompt >= ctx_len) {
        rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST,
                               p->endpoint == NGX_HTTP_SRT_EP_CHAT
                               ? "messages" : "prompt",
                               "This model's maximum context length is %uz "
                               "tokens. However, your prompt has %uz tokens. "
                               "Please reduce the length of the %s.",
                               ctx_len, p->n_prompt,
                               p->endpoint == NGX_HTTP_SRT_EP_CHAT
                               ? "messages" : "prompt");
        goto failed;
    }

    max_new = ctx_len - p->n_prompt;

    v = f_max_completion && !YAJL_IS_NULL(f_max_completion) ? f_max_completion
                                                            : f_max_tokens;
    rc = ngx_http_srt_get_int(&ps, v,
                              v == f_max_completion ? "max_completion_tokens"
                                                    : "max_tokens",
                              1, NGX_MAX_INT32_VALUE, &ll);
    ngx_http_srt_check(rc);

    if (rc == NGX_OK) {
        if ((size_t) ll > max_new) {
            rc = ngx_http_srt_fail(&ps, NGX_HTTP_BAD_REQUEST,
                                   v == f_max_completion
                                   ? "max_completion_tokens" : "max_tokens",
                                   "This model's maximum context length is "
                                   "%uz tokens. However, you requested %uz "
                                   "tokens (%uz in the %s, %L in the "
                                   "completion). Please reduce the length of "
                                   "the %s or completion.",
                                   ctx_len, p->n_prompt + (size_t) ll,
                                   p->n_prompt,
                                   p->endpoint == NGX_HTTP_SRT_EP_CHAT
                                   ? "messages" : "prompt", ll,
                                   p->endpoint == NGX_HTTP_SRT_EP_CHAT
                                   ? "messages" : "prompt");
            goto failed;
        }

        max_new = (size_t) ll;
        p->max_tokens_set = 1;

    } else if (p->endpoint == NGX_HTTP_SRT_EP_COMPLETIONS && max_new > 16) {
        max_new = 16;   /* OpenAI's completions default */
    }

    p->rq.sampling.max_tokens = (int32_t) max_new;

    rc = ngx_http_srt_activations_bound(&ps, &info, max_new);
    ngx_http_srt_check(rc);

    rc = ngx_http_srt_get_int(&ps, f_min_tokens, "min_tokens", 0,
                              (long long) max_new, &ll);
    ngx_http_srt_check(rc);
    if (rc == NGX_OK) {
        p->rq.sampling.min_tokens = (int32_t) ll;
    }

    yajl_tree_free(root);

    return NGX_OK;

failed:

    if (root) {
        yajl_tree_free(root);
    }

    return rc == NGX_DECLINED ? NGX_DECLINED : NGX_ERROR;
}
