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


typedef struct ngx_http_srt_field_s  ngx_http_srt_field_t;

/* ngx_http_srt_parse_t (ngx_http_srt_module.h): one body being parsed */
struct ngx_http_srt_parse_s {
    ngx_http_request_t    *r;
    ngx_http_srt_model_t  *m;
    ngx_http_srt_params_t *p;
    yajl_val               root;    /* the body; kept while parked */
    yajl_val              *vals;    /* each row's value in the body, or NULL */
    size_t                 vocab;   /* token ids below this are the model's */
    ngx_uint_t            *status;
    const char           **param;
    char                  *errbuf;
    size_t                 errlen;
};


/*
 * A request field, the way an ngx_command_t is a directive: the handler gets
 * the body's value (NULL when the field is absent, so that defaults and
 * "required" live in the handler too) and the row; it returns NGX_OK (set),
 * NGX_DECLINED (absent or null) or NGX_ERROR (the 400 is in the parse
 * context). The ngx_http_srt_set_*_slot handlers check the JSON type and
 * [min, max] and store at offset into ngx_http_srt_params_t.
 */

typedef ngx_int_t (*ngx_http_srt_field_pt)(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);

struct ngx_http_srt_field_s {
    const char              *name;
    ngx_uint_t               flags;
    ngx_http_srt_field_pt    set;       /* NULL: read by another handler */
    size_t                   offset;
    double                   min;
    double                   max;
    ngx_uint_t               post;      /* the handler's own argument */
};

/* checked once the tokenizer is there (vocabulary-sized values, the prompt) */
#define NGX_HTTP_SRT_FIELD_MODEL        0x01
#define NGX_HTTP_SRT_FIELD_CHAT         0x02    /* only /v1/chat/completions */
#define NGX_HTTP_SRT_FIELD_COMPLETIONS  0x04    /* only /v1/completions */
#define NGX_HTTP_SRT_FIELD_OPEN_MIN     0x08    /* min itself is out of range */
#define NGX_HTTP_SRT_FIELD_INT32        0x10    /* offset is an int32_t, not */
                                                /* an ngx_int_t/ngx_flag_t */
#define NGX_HTTP_SRT_NO_OFFSET          ((size_t) -1)

#define ngx_http_srt_param(field)  offsetof(ngx_http_srt_params_t, field)


static ngx_int_t ngx_http_srt_set_float_slot(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_set_int_slot(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_set_flag_slot(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_set_str_slot(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_output_format(ngx_http_srt_parse_t *ps,
    yajl_val fmt, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_grammar_string(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_reasoning_fields(ngx_http_srt_parse_t *ps,
    yajl_val sep, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_request_hooks(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_activations(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_modalities(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_model(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_top_k(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_seed(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_echo(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_stream_options(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_logprobs(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_top_logprobs(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_stop(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_stop_token_ids(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_logit_bias(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_min_tokens(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_required(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f);
static ngx_int_t ngx_http_srt_messages_required(ngx_http_srt_parse_t *ps,
    yajl_val v, const ngx_http_srt_field_t *f);


/*
 * The request fields, checked in this order (so a body with two faults gets
 * the first one's 400): first those that need nothing but the body, then,
 * once the tokenizer is there, those sized by its vocabulary. The prompt is
 * rendered and tokenized after both, when the scheduler is ready, and
 * max_tokens/min_tokens are bounded by what the context leaves
 * (ngx_http_srt_budget). A field no row names is looked up among the
 * unsupported ones (ngx_http_srt_unsupported) and otherwise ignored.
 */

static const ngx_http_srt_field_t  ngx_http_srt_fields[] = {

    { "response_format", 0, ngx_http_srt_output_format,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    /* read by response_format's handler (tools also by the chat template) */
    { "tools", 0, NULL, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },
    { "tool_choice", 0, NULL, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },
    { "function_call", 0, NULL, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },
    { "parallel_tool_calls", 0, NULL, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    /* after the tools: it may switch off the reasoning parser they set */
    { "separate_reasoning", 0, ngx_http_srt_reasoning_fields,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    /* read by separate_reasoning's handler */
    { "stream_reasoning", 0, NULL, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    { "json_schema", 0, ngx_http_srt_grammar_string,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, SRT_GRAMMAR_JSON_SCHEMA },

    { "regex", 0, ngx_http_srt_grammar_string,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, SRT_GRAMMAR_REGEX },

    { "ebnf", 0, ngx_http_srt_grammar_string,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, SRT_GRAMMAR_GBNF },

    { "hooks", 0, ngx_http_srt_request_hooks,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    /* read by hooks' handler: both make the prefix-cache namespace */
    { "cache_salt", 0, NULL, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    /* the module range and the size: ngx_http_srt_activations_bound */
    { "return_activations", 0, ngx_http_srt_activations,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    { "modalities", 0, ngx_http_srt_modalities,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    { "model", 0, ngx_http_srt_model, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    { "temperature", 0, ngx_http_srt_set_float_slot,
      ngx_http_srt_param(rq.sampling.temperature), 0, 2, 0 },

    { "top_p", NGX_HTTP_SRT_FIELD_OPEN_MIN, ngx_http_srt_set_float_slot,
      ngx_http_srt_param(rq.sampling.top_p), 0, 1, 0 },

    { "top_k", 0, ngx_http_srt_top_k,
      ngx_http_srt_param(rq.sampling.top_k), -1, 1 << 30, 0 },

    { "min_p", 0, ngx_http_srt_set_float_slot,
      ngx_http_srt_param(rq.sampling.min_p), 0, 1, 0 },

    { "frequency_penalty", 0, ngx_http_srt_set_float_slot,
      ngx_http_srt_param(rq.sampling.frequency_penalty), -2, 2, 0 },

    { "presence_penalty", 0, ngx_http_srt_set_float_slot,
      ngx_http_srt_param(rq.sampling.presence_penalty), -2, 2, 0 },

    { "repetition_penalty", NGX_HTTP_SRT_FIELD_OPEN_MIN,
      ngx_http_srt_set_float_slot,
      ngx_http_srt_param(rq.sampling.repetition_penalty), 0, 2, 0 },

    { "n", 0, ngx_http_srt_set_int_slot,
      ngx_http_srt_param(n), 1, NGX_HTTP_SRT_MAX_N, 0 },

    { "best_of", 0, ngx_http_srt_set_int_slot,
      NGX_HTTP_SRT_NO_OFFSET, 1, 1, 0 },

    { "seed", 0, ngx_http_srt_seed, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    { "ignore_eos", NGX_HTTP_SRT_FIELD_INT32, ngx_http_srt_set_flag_slot,
      ngx_http_srt_param(rq.sampling.ignore_eos), 0, 0, 0 },

    { "stream", 0, ngx_http_srt_set_flag_slot,
      ngx_http_srt_param(stream), 0, 0, 0 },

    { "echo", 0, ngx_http_srt_echo, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    { "stream_options", 0, ngx_http_srt_stream_options,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    { "user", 0, ngx_http_srt_set_str_slot,
      NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    /* a boolean for chat, a count in [min, max] for completions */
    { "logprobs", 0, ngx_http_srt_logprobs,
      NGX_HTTP_SRT_NO_OFFSET, 0, 5, 0 },

    { "top_logprobs", NGX_HTTP_SRT_FIELD_CHAT, ngx_http_srt_top_logprobs,
      NGX_HTTP_SRT_NO_OFFSET, 0, SRT_REQ_MAX_TOP_LOGPROBS, 0 },

    { "stop", 0, ngx_http_srt_stop, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    { "stop_token_ids", NGX_HTTP_SRT_FIELD_MODEL, ngx_http_srt_stop_token_ids,
      NGX_HTTP_SRT_NO_OFFSET, 0, SRT_REQ_MAX_STOP_IDS, 0 },

    { "logit_bias", NGX_HTTP_SRT_FIELD_MODEL, ngx_http_srt_logit_bias,
      NGX_HTTP_SRT_NO_OFFSET, -100, 100, 0 },

    /* types and ranges here; ngx_http_srt_budget bounds them by the context */
    { "max_tokens", NGX_HTTP_SRT_FIELD_MODEL, ngx_http_srt_set_int_slot,
      NGX_HTTP_SRT_NO_OFFSET, 1, NGX_MAX_INT32_VALUE, 0 },

    { "max_completion_tokens", NGX_HTTP_SRT_FIELD_MODEL,
      ngx_http_srt_set_int_slot,
      NGX_HTTP_SRT_NO_OFFSET, 1, NGX_MAX_INT32_VALUE, 0 },

    { "min_tokens", NGX_HTTP_SRT_FIELD_MODEL, ngx_http_srt_min_tokens,
      NGX_HTTP_SRT_NO_OFFSET, 0, NGX_MAX_INT32_VALUE, 0 },

    /* the prompt: present here, rendered and tokenized when the scheduler is */
    { "prompt", NGX_HTTP_SRT_FIELD_MODEL|NGX_HTTP_SRT_FIELD_COMPLETIONS,
      ngx_http_srt_required, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },

    { "messages", NGX_HTTP_SRT_FIELD_MODEL|NGX_HTTP_SRT_FIELD_CHAT,
      ngx_http_srt_messages_required, NGX_HTTP_SRT_NO_OFFSET, 0, 0, 0 },
};

#define NGX_HTTP_SRT_NFIELDS                                                 \
    (sizeof(ngx_http_srt_fields) / sizeof(ngx_http_srt_field_t))


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


static yajl_val
ngx_http_srt_arg(ngx_http_srt_parse_t *ps, const char *name)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_SRT_NFIELDS; i++) {
        if (ngx_strcmp(ngx_http_srt_fields[i].name, name) == 0) {
            return ps->vals[i];
        }
    }

    return NULL;
}


/* an integer within the row's [min, max] */

static ngx_int_t
ngx_http_srt_row_int(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f, long long *n)
{
    return ngx_http_srt_get_int(ps, v, f->name, (long long) f->min,
                                (long long) f->max, n);
}


static void
ngx_http_srt_store(ngx_http_srt_parse_t *ps, const ngx_http_srt_field_t *f,
    long long n)
{
    u_char  *field;

    if (f->offset == NGX_HTTP_SRT_NO_OFFSET) {
        return;
    }

    field = (u_char *) ps->p + f->offset;

    if (f->flags & NGX_HTTP_SRT_FIELD_INT32) {
        *(int32_t *) field = (int32_t) n;

    } else {
        *(ngx_int_t *) field = (ngx_int_t) n;
    }
}


static ngx_int_t
ngx_http_srt_set_float_slot(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    double     d;
    ngx_int_t  rc;

    rc = ngx_http_srt_get_number(ps, v, f->name, f->min, f->max,
                                 f->flags & NGX_HTTP_SRT_FIELD_OPEN_MIN, &d);

    if (rc == NGX_OK && f->offset != NGX_HTTP_SRT_NO_OFFSET) {
        *(float *) ((u_char *) ps->p + f->offset) = (float) d;
    }

    return rc;
}


static ngx_int_t
ngx_http_srt_set_int_slot(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    ngx_int_t  rc;
    long long  n = 0;

    rc = ngx_http_srt_row_int(ps, v, f, &n);
    if (rc == NGX_OK) {
        ngx_http_srt_store(ps, f, n);
    }

    return rc;
}


static ngx_int_t
ngx_http_srt_set_flag_slot(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    ngx_int_t   rc;
    ngx_flag_t  flag = 0;

    rc = ngx_http_srt_get_bool(ps, v, f->name, &flag);
    if (rc == NGX_OK) {
        ngx_http_srt_store(ps, f, flag);
    }

    return rc;
}


/* a string that changes nothing here (user): its type is still checked */

static ngx_int_t
ngx_http_srt_set_str_slot(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_DECLINED;
    }

    if (!YAJL_IS_STRING(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, f->name,
                                 "'%s' must be a string", f->name);
    }

    return NGX_OK;
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

    if (v == NULL) {
        return yajl_gen_null(g);
    }

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

        if (content == NULL) {
            /* as HF passes it: a message without content has none (an assistant
               message with tool_calls only); templates test "is defined" */

        } else if (YAJL_IS_NULL(content)) {
            ngx_http_srt_gen_str(g, "content");
            yajl_gen_null(g);

        } else if (YAJL_IS_STRING(content)) {
            ngx_http_srt_gen_str(g, "content");
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

            ngx_http_srt_gen_str(g, "content");
            ngx_http_srt_gen_str(g, (char *) buf);
        }

        yajl_gen_map_close(g);
    }

    yajl_gen_array_close(g);

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_stop(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
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

    if (p->n_stop > 0 && p->rq.acts.n > 0) {
        /* a stop string ends the text in the worker, after the scheduler ran
         * past it: the rows would not match the text returned */
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "stop",
                                 "'stop' strings cannot be combined with "
                                 "'return_activations' (stop_token_ids can)");
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

    /* deepseek-r1 and qwen3 (thinking) templates may open the think block */
    ps->p->think_open = srt_prompt_think_open(text, text_len);

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


/* SGLang's json_schema, regex and ebnf: the row's post is the grammar kind */

static ngx_int_t
ngx_http_srt_grammar_string(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    ngx_int_t  rc;

    rc = ngx_http_srt_set_str_slot(ps, v, f);
    if (rc != NGX_OK) {
        return rc == NGX_DECLINED ? NGX_OK : rc;
    }

    return ngx_http_srt_grammar_set(ps, f->name, (srt_grammar_kind) f->post,
                                    v->u.string, ngx_strlen(v->u.string));
}


yajl_val
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
 * Tools. The model calls them in the format its chat template teaches
 * (srt_tool_call_parser; src/include/srt/output_parse.h):
 *   hermes   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   llama3   {"name": "f", "parameters": {...}}, several joined by "; "
 *   mistral  [{"name": "f", "arguments": {...}}, ...]  ([TOOL_CALLS] is a special
 *            token, which a grammar over text cannot produce; the parser takes the
 *            bare array at the start of the content)
 *   deepseekv3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f
 *            \n```json\n{...}\n```<｜tool▁call▁end｜>, several joined by "\n",
 *            then <｜tool▁calls▁end｜>
 *   pythonic [f(a="x", b=1), g()]
 * "auto" leaves the output free and parses calls out of it (response side);
 * "required" and a named function constrain the output to calls of the allowed
 * functions, each's arguments following the function's parameter schema, by a
 * grammar built from those schemas. "none" offers no call.
 */

static ngx_int_t ngx_http_srt_tools_grammar_split(ngx_http_srt_parse_t *ps,
    yajl_val tools, const char *only, ngx_flag_t parallel);


/* tools[i]'s function name (a string, else a 400) and parameters */

static ngx_int_t
ngx_http_srt_tool_at(ngx_http_srt_parse_t *ps, yajl_val tools, size_t i,
    yajl_val *name, yajl_val *params)
{
    yajl_val  fn;

    fn = ngx_http_srt_member(tools->u.array.values[i], "function");
    *name = ngx_http_srt_member(fn, "name");
    *params = ngx_http_srt_member(fn, "parameters");

    if (!YAJL_IS_STRING(*name)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                 "'tools[%uz].function.name' must be a "
                                 "string", i);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_tools_grammar(ngx_http_srt_parse_t *ps, yajl_val tools,
    const char *only, ngx_flag_t parallel)
{
    const char     *args_key, *root;
    size_t          i, len, n = 0;
    char           *gbnf, *body;
    yajl_val        name, params;
    yajl_gen        g;
    srt_err         err;
    ngx_int_t       rc;
    const u_char   *buf;

    if (ps->p->tool_format == SRT_TOOLS_DEEPSEEK_V3
        || ps->p->tool_format == SRT_TOOLS_PYTHONIC)
    {
        return ngx_http_srt_tools_grammar_split(ps, tools, only, parallel);
    }

    switch (ps->p->tool_format) {
    case SRT_TOOLS_LLAMA3:
        args_key = "parameters";
        root = parallel ? "root ::= call_json (\"; \" call_json)*\n"
                        : "root ::= call_json\n";
        break;
    case SRT_TOOLS_MISTRAL:
        args_key = "arguments";
        root = parallel ? "root ::= \"[\" call_json (\", \" call_json)* \"]\"\n"
                        : "root ::= \"[\" call_json \"]\"\n";
        break;
    default:
        args_key = "arguments";
        root = parallel ? "root ::= call (\"\\n\" call)*\n"
                          "call ::= \"<tool_call>\\n\" call_json "
                          "\"\\n</tool_call>\"\n"
                        : "root ::= call\n"
                          "call ::= \"<tool_call>\\n\" call_json "
                          "\"\\n</tool_call>\"\n";
    }

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
        if (ngx_http_srt_tool_at(ps, tools, i, &name, &params) != NGX_OK) {
            yajl_gen_free(g);
            return NGX_ERROR;
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
        ngx_http_srt_gen_str(g, args_key);
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
        ngx_http_srt_gen_str(g, args_key);
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

    ngx_sprintf((u_char *) gbnf, "%scall_json ::= %s%Z", root, body + 9);
    free(body);

    rc = ngx_http_srt_grammar_set(ps, "tools", SRT_GRAMMAR_GBNF, gbnf,
                                  ngx_strlen(gbnf));

    return rc;
}


/*
 * The formats whose calls do not hold name and arguments in one JSON object
 * (deepseekv3, pythonic) get a grammar per function, each from its schemas'
 * grammars under a prefix of their own (srt_gbnf_prefix_rules), the rules all
 * of those have alike defined once:
 *   deepseekv3  the arguments follow the parameters schema;
 *   pythonic    each keyword argument its property's schema, as a Python
 *               literal, in the schema's order; optional ones may be left out.
 * Names are written into the grammar as they are: they must be what OpenAI
 * allows (letters, digits, '_', '-', '.'; at most 64), and Python names for
 * pythonic calls (argument names without '-' and '.').
 */

static ngx_int_t
ngx_http_srt_gbnf_printf(ngx_array_t *a, const char *fmt, ...)
{
    u_char   buf[512], *e, *p;
    va_list  args;

    va_start(args, fmt);
    e = ngx_vslprintf(buf, buf + sizeof(buf), fmt, args);
    va_end(args);

    p = ngx_array_push_n(a, e - buf);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(p, buf, e - buf);

    return NGX_OK;
}


static ngx_flag_t
ngx_http_srt_tool_name_ok(const char *s, ngx_flag_t python, ngx_flag_t arg)
{
    size_t  i;

    for (i = 0; s[i]; i++) {
        if (isalpha((u_char) s[i]) || s[i] == '_') {
            continue;
        }

        if ((i > 0 || !python)
            && (isdigit((u_char) s[i])
                || (!arg && (s[i] == '-' || s[i] == '.'))))
        {
            continue;
        }

        return 0;
    }

    return i > 0 && i <= 64;
}


/* One schema's grammar, its rules prefixed, appended to a; flags as
 * srt_gbnf_prefix_rules takes them, the shared rules kept the first time */

static ngx_int_t
ngx_http_srt_schema_rules(ngx_http_srt_parse_t *ps, ngx_array_t *a,
    yajl_val schema, yajl_val defs, const char *prefix, int *flags)
{
    char           *body, *pre;
    size_t          k, len;
    u_char         *p;
    yajl_gen        g;
    srt_err         err;
    ngx_int_t       rc;
    const u_char   *buf;

    g = yajl_gen_alloc(NULL);
    if (g == NULL) {
        return NGX_ERROR;
    }

    if (YAJL_IS_OBJECT(schema)) {
        /* a property's schema keeps the $defs of the parameters it is in */
        yajl_gen_map_open(g);
        if (schema->u.object.len == 0) {
            ngx_http_srt_gen_str(g, "type");
            ngx_http_srt_gen_str(g, "object");
        }
        for (k = 0; k < schema->u.object.len; k++) {
            ngx_http_srt_gen_str(g, schema->u.object.keys[k]);
            ngx_http_srt_gen_val(g, schema->u.object.values[k]);
        }
        if (defs && ngx_http_srt_member(schema, "$defs") == NULL) {
            ngx_http_srt_gen_str(g, "$defs");
            ngx_http_srt_gen_val(g, defs);
        }
        rc = yajl_gen_map_close(g) == yajl_gen_status_ok;

    } else {
        rc = ngx_http_srt_gen_val(g, schema) == yajl_gen_status_ok;
    }

    if (!rc) {
        yajl_gen_free(g);
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                 "'tools' parameters cannot be serialized");
    }

    yajl_gen_get_buf(g, &buf, &len);

    err.msg[0] = '\0';
    rc = srt_grammar_json_schema_to_gbnf((const char *) buf, len, NULL,
                                         &body, &err);
    yajl_gen_free(g);

    if (rc != SRT_OK) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                 "Invalid 'tools' parameters: %s", err.msg);
    }

    pre = srt_gbnf_prefix_rules(body, prefix, *flags);
    free(body);
    if (pre == NULL) {
        return NGX_ERROR;
    }

    *flags = (*flags & ~SRT_GBNF_SHARED_KEEP) | SRT_GBNF_SHARED_DROP;

    len = ngx_strlen(pre);
    p = ngx_array_push_n(a, len);
    if (p != NULL) {
        ngx_memcpy(p, pre, len);
    }
    free(pre);

    return p ? NGX_OK : NGX_ERROR;
}


static ngx_int_t
ngx_http_srt_tools_grammar_split(ngx_http_srt_parse_t *ps, yajl_val tools,
    const char *only, ngx_flag_t parallel)
{
    int           flags;
    u_char        prefix[64], alt_a[64], alt_b[64], *text;
    size_t        i, j, k, n = 0;
    yajl_val      name, params, props, req, defs;
    ngx_flag_t    py, optional;
    ngx_array_t  *out, *rules;

    py = ps->p->tool_format == SRT_TOOLS_PYTHONIC;
    flags = (py ? SRT_GBNF_PYTHON_LITERALS : 0) | SRT_GBNF_SHARED_KEEP;

    out = ngx_array_create(ps->r->pool, 4096, 1);
    rules = ngx_array_create(ps->r->pool, 4096, 1);
    if (out == NULL || rules == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_srt_gbnf_printf(out, "%s\ncall ::=",
            py ? (parallel ? "root ::= \"[\" call (\", \" call)* \"]\""
                           : "root ::= \"[\" call \"]\"")
               : (parallel ? "root ::= \"<｜tool▁calls▁begin｜>\" call "
                             "(\"\\n\" call)* \"<｜tool▁calls▁end｜>\""
                           : "root ::= \"<｜tool▁calls▁begin｜>\" call "
                             "\"<｜tool▁calls▁end｜>\""))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < tools->u.array.len; i++) {
        if (ngx_http_srt_tool_at(ps, tools, i, &name, &params) != NGX_OK) {
            return NGX_ERROR;
        }

        if (only && ngx_strcmp(name->u.string, only) != 0) {
            continue;
        }

        if (!ngx_http_srt_tool_name_ok(name->u.string, py, 0)) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                     "'tools[%uz].function.name' cannot be "
                                     "called in the %s format: it must be "
                                     "%s, at most 64", i,
                                     py ? "pythonic" : "deepseekv3",
                                     py ? "a Python name (dots and dashes "
                                          "allowed after the first letter)"
                                        : "letters, digits, '_', '-', '.'");
        }

        if (ngx_http_srt_gbnf_printf(out, "%s t%uz-call", n ? " |" : "", i)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        n++;

        if (!YAJL_IS_OBJECT(params)) {
            params = NULL;
        }

        if (!py) {
            ngx_sprintf(prefix, "t%uz-%Z", i);
            if (ngx_http_srt_gbnf_printf(rules,
                    "t%uz-call ::= \"<｜tool▁call▁begin｜>function"
                    "<｜tool▁sep｜>%s\\n```json\\n\" t%uz-root "
                    "\"\\n```<｜tool▁call▁end｜>\"\n",
                    i, name->u.string, i)
                != NGX_OK
                || ngx_http_srt_schema_rules(ps, rules, params, NULL,
                                             (char *) prefix, &flags)
                   != NGX_OK)
            {
                return NGX_ERROR;
            }
            continue;
        }

        props = ngx_http_srt_member(params, "properties");
        req = ngx_http_srt_member(params, "required");
        defs = ngx_http_srt_member(params, "$defs");
        k = YAJL_IS_OBJECT(props) ? props->u.object.len : 0;

        /* t-b<j>: the arguments from the j-th on, none written yet;
           t-a<j>: the same after one */
        if (ngx_http_srt_gbnf_printf(rules,
                "t%uz-call ::= \"%s(\" t%uz-b0 \")\"\n"
                "t%uz-b%uz ::= \"\"\nt%uz-a%uz ::= \"\"\n",
                i, name->u.string, i, i, k, i, k)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        for (j = 0; j < k; j++) {
            if (!ngx_http_srt_tool_name_ok(props->u.object.keys[j], 1, 1)) {
                return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tools",
                                         "'tools[%uz].function.parameters' "
                                         "property \"%s\" cannot be a "
                                         "pythonic keyword argument: it must "
                                         "be a Python name, at most 64", i,
                                         props->u.object.keys[j]);
            }

            optional = 1;
            if (YAJL_IS_ARRAY(req)) {
                size_t  q;

                for (q = 0; q < req->u.array.len; q++) {
                    if (YAJL_IS_STRING(req->u.array.values[q])
                        && ngx_strcmp(req->u.array.values[q]->u.string,
                                      props->u.object.keys[j]) == 0)
                    {
                        optional = 0;
                    }
                }
            }

            ngx_sprintf(prefix, "t%uz-p%uz-%Z", i, j);
            ngx_sprintf(alt_b, optional ? " | t%uz-b%uz%Z" : "%Z", i, j + 1);
            ngx_sprintf(alt_a, optional ? " | t%uz-a%uz%Z" : "%Z", i, j + 1);
            if (ngx_http_srt_gbnf_printf(rules,
                    "t%uz-v%uz ::= \"%s=\" t%uz-p%uz-root\n"
                    "t%uz-b%uz ::= t%uz-v%uz t%uz-a%uz%s\n"
                    "t%uz-a%uz ::= \", \" t%uz-v%uz t%uz-a%uz%s\n",
                    i, j, props->u.object.keys[j], i, j,
                    i, j, i, j, i, j + 1, alt_b,
                    i, j, i, j, i, j + 1, alt_a)
                != NGX_OK
                || ngx_http_srt_schema_rules(ps, rules,
                                             props->u.object.values[j], defs,
                                             (char *) prefix, &flags)
                   != NGX_OK)
            {
                return NGX_ERROR;
            }
        }
    }

    if (n == 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "tool_choice",
                                 "'tool_choice' names function \"%s\", "
                                 "which is not in 'tools'", only);
    }

    text = ngx_array_push_n(out, rules->nelts + 2);
    if (text == NULL) {
        return NGX_ERROR;
    }

    *text++ = '\n';
    ngx_memcpy(text, rules->elts, rules->nelts);
    text[rules->nelts] = '\0';

    return ngx_http_srt_grammar_set(ps, "tools", SRT_GRAMMAR_GBNF, out->elts,
                                    out->nelts - 1);
}


/* The location's parsers of the output (srt_tool_call_parser, srt_reasoning_parser):
 * the tool-call format is used when tools are on, reasoning on chat completions. */

static void
ngx_http_srt_output_parsers(ngx_http_srt_parse_t *ps)
{
    ngx_http_srt_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(ps->r, ngx_http_srt_module);

    ps->p->tool_format = slcf->tool_parser == NGX_HTTP_SRT_TOOLS_AUTO
                         ? ps->m->tool_format
                         : (srt_tool_format) slcf->tool_parser;

    if (ps->p->endpoint == NGX_HTTP_SRT_EP_CHAT) {
        ps->p->reasoning = (srt_reasoning_format) slcf->reasoning_parser;
    }
}


static ngx_int_t
ngx_http_srt_output_format(ngx_http_srt_parse_t *ps, yajl_val fmt,
    const ngx_http_srt_field_t *f)
{
    yajl_val     fn, name, tools, choice, fcall, parallel;
    ngx_flag_t   has_tools, par;
    ngx_int_t    rc;

    tools = ngx_http_srt_arg(ps, "tools");
    choice = ngx_http_srt_arg(ps, "tool_choice");
    fcall = ngx_http_srt_arg(ps, "function_call");
    parallel = ngx_http_srt_arg(ps, "parallel_tool_calls");

    rc = ngx_http_srt_response_format(ps, fmt);
    if (rc != NGX_OK) {
        return rc;
    }

    ngx_http_srt_output_parsers(ps);

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

    ps->p->one_call = !par;

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

/* SGLang's separate_reasoning (false: the think block stays in content) and
 * stream_reasoning (false: reasoning_content in one delta once the block ends). */

static ngx_int_t
ngx_http_srt_reasoning_fields(ngx_http_srt_parse_t *ps, yajl_val sep,
    const ngx_http_srt_field_t *f)
{
    yajl_val  stream;

    stream = ngx_http_srt_arg(ps, "stream_reasoning");

    if (sep && !YAJL_IS_NULL(sep) && !YAJL_IS_TRUE(sep)
        && !YAJL_IS_FALSE(sep))
    {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "separate_reasoning",
                                 "'separate_reasoning' must be a boolean");
    }

    if (stream && !YAJL_IS_NULL(stream) && !YAJL_IS_TRUE(stream)
        && !YAJL_IS_FALSE(stream))
    {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "stream_reasoning",
                                 "'stream_reasoning' must be a boolean");
    }

    if (YAJL_IS_FALSE(sep)) {
        ps->p->reasoning = SRT_REASONING_OFF;
    }

    ps->p->hold_reasoning = YAJL_IS_FALSE(stream);

    return NGX_OK;
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
ngx_http_srt_activations(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    size_t                    i, j;
    yajl_val                  e, mv;
    const char               *key;
    srt_act_spec             *sp;
    srt_request_activations  *ra;
    ngx_http_srt_loc_conf_t  *slcf;

    ra = &ps->p->rq.acts;
    ngx_memzero(ra, sizeof(srt_request_activations));

    if (v == NULL || YAJL_IS_NULL(v)
        || (YAJL_IS_ARRAY(v) && v->u.array.len == 0))
    {
        return NGX_DECLINED;
    }

    slcf = ngx_http_get_module_loc_conf(ps->r, ngx_http_srt_module);

    if (slcf->max_act_bytes == 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                 "return_activations",
                                 "'return_activations' is not enabled here: "
                                 "the location has no "
                                 "srt_max_activation_bytes");
    }

    if (!YAJL_IS_ARRAY(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                 "return_activations",
                                 "'return_activations' must be an array of "
                                 "{\"module\": ..., \"reduce\": ..., "
                                 "\"dtype\": ...} objects");
    }

    if (v->u.array.len > SRT_REQ_MAX_ACTIVATIONS) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                 "return_activations",
                                 "'return_activations' has %uz entries; "
                                 "at most %d", v->u.array.len,
                                 SRT_REQ_MAX_ACTIVATIONS);
    }

    for (i = 0; i < v->u.array.len; i++) {
        e = v->u.array.values[i];
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
            mv = e->u.object.values[j];

            if (ngx_strcmp(key, "module") == 0) {
                if (!YAJL_IS_STRING(mv)
                    || ngx_strlen(mv->u.string) >= SRT_REQ_ACT_MODULE_MAX
                    || srt_act_module_index(mv->u.string, 1 << 24) < 0)
                {
                    return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                   "return_activations",
                                   "return_activations[%uz].module must be "
                                   "\"model.embed_tokens\", "
                                   "\"model.layers.N\" or \"model.norm\"", i);
                }
                ngx_cpystrn((u_char *) sp->module, (u_char *) mv->u.string,
                            SRT_REQ_ACT_MODULE_MAX);

            } else if (ngx_strcmp(key, "reduce") == 0) {
                if (YAJL_IS_STRING(mv)) {
                    sp->reduce = ngx_strcmp(mv->u.string, "last") == 0
                                 ? SRT_ACT_LAST
                                 : ngx_strcmp(mv->u.string, "mean") == 0
                                 ? SRT_ACT_MEAN
                                 : ngx_strcmp(mv->u.string, "all") == 0
                                 ? SRT_ACT_ALL : -1;
                }
                if (sp->reduce < 0) {
                    return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                   "return_activations",
                                   "return_activations[%uz].reduce must be "
                                   "\"last\", \"mean\" or \"all\"", i);
                }

            } else if (ngx_strcmp(key, "dtype") == 0) {
                if (YAJL_IS_STRING(mv)) {
                    sp->dtype = ngx_strcmp(mv->u.string, "f32") == 0
                                ? SRT_ACT_F32
                                : ngx_strcmp(mv->u.string, "f16") == 0
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
ngx_http_srt_activations_bound(ngx_http_srt_parse_t *ps, size_t max_new)
{
    int32_t                   i;
    uint64_t                  one, total;
    srt_chan_model_info       info;
    srt_request_activations  *ra;
    ngx_http_srt_loc_conf_t  *slcf;

    ra = &ps->p->rq.acts;

    if (ra->n == 0) {
        return NGX_OK;
    }

    if (srt_chan_model_info_get(ps->m->chan, &info) != SRT_OK
        || info.hidden_size <= 0 || info.n_layers <= 0)
    {
        return NGX_DECLINED;
    }

    for (i = 0; i < ra->n; i++) {
        if (srt_act_module_index(ra->spec[i].module, info.n_layers) < 0) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST,
                                     "return_activations",
                                     "return_activations[%d].module: this "
                                     "model has model.layers.0 to "
                                     "model.layers.%d, not \"%s\"", (int) i,
                                     (int) info.n_layers - 1,
                                     ra->spec[i].module);
        }
    }

    slcf = ngx_http_get_module_loc_conf(ps->r, ngx_http_srt_module);

    one = srt_request_activations_bytes(ra,
                                        (int64_t) (ps->p->n_prompt + max_new
                                                   - 1),
                                        info.hidden_size);
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
                                 (int) info.hidden_size,
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

static ngx_int_t ngx_http_srt_select_hooks(ngx_http_srt_parse_t *ps,
    yajl_val f_hooks, uint64_t *hash);


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
    const ngx_http_srt_field_t *f)
{
    uint64_t            h;
    yajl_val            f_salt;
    srt_request_hooks  *rh;

    f_salt = ngx_http_srt_arg(ps, "cache_salt");
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

    if (f_hooks != NULL && !YAJL_IS_NULL(f_hooks)
        && !(YAJL_IS_ARRAY(f_hooks) && f_hooks->u.array.len == 0)
        && ngx_http_srt_select_hooks(ps, f_hooks, &h) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (rh->n > 0 || ps->p->rq.cache_ns) {
        ps->p->rq.cache_ns = h ? h : 1;   /* 0 is the shared namespace */
    }

    return NGX_OK;
}


/* The "hooks" selection into rq.hooks, each name and config hashed into *h. */

static ngx_int_t
ngx_http_srt_select_hooks(ngx_http_srt_parse_t *ps, yajl_val f_hooks,
    uint64_t *hash)
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
    h = *hash;

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
        *hash = h;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_modalities(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    if (v == NULL || YAJL_IS_NULL(v)
        || (YAJL_IS_ARRAY(v) && v->u.array.len == 1
            && YAJL_IS_STRING(v->u.array.values[0])
            && ngx_strcmp(v->u.array.values[0]->u.string, "text") == 0))
    {
        return NGX_OK;
    }

    return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "modalities",
                             "'modalities' other than [\"text\"] is not "
                             "supported by this server");
}


static ngx_int_t
ngx_http_srt_model(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    size_t                 n;
    ngx_http_srt_model_t  *m = ps->m;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_DECLINED;
    }

    if (!YAJL_IS_STRING(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "model",
                                 "'model' must be a string");
    }

    n = ngx_strlen(v->u.string);

    if (n != m->name.len || ngx_strncmp(v->u.string, m->name.data, n) != 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_NOT_FOUND, "model",
                                 "The model `%s` does not exist; this "
                                 "endpoint serves `%V`",
                                 v->u.string, &m->name);
    }

    return NGX_OK;
}


/* 0 means "no limit", as -1 does */

static ngx_int_t
ngx_http_srt_top_k(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    ngx_int_t  rc;
    long long  n = 0;

    rc = ngx_http_srt_row_int(ps, v, f, &n);
    if (rc == NGX_OK) {
        ps->p->rq.sampling.top_k = n == 0 ? -1 : (int32_t) n;
    }

    return rc;
}


static ngx_int_t
ngx_http_srt_seed(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    ngx_int_t  rc;
    long long  n = 0;

    rc = ngx_http_srt_get_int(ps, v, f->name, LLONG_MIN, LLONG_MAX, &n);
    if (rc == NGX_OK) {
        ps->p->rq.sampling.has_seed = 1;
        ps->p->rq.sampling.seed = (uint64_t) n;
    }

    return rc;
}


static ngx_int_t
ngx_http_srt_echo(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    ngx_int_t   rc;
    ngx_flag_t  flag = 0;

    rc = ngx_http_srt_get_bool(ps, v, f->name, &flag);
    if (rc == NGX_OK && flag) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "echo",
                                 "'echo' is not supported");
    }

    return rc;
}


static ngx_int_t
ngx_http_srt_stream_options(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    size_t      i;
    ngx_int_t   rc;
    ngx_flag_t  flag = 0;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_DECLINED;
    }

    if (!YAJL_IS_OBJECT(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "stream_options",
                                 "'stream_options' must be an object");
    }

    for (i = 0; i < v->u.object.len; i++) {
        if (ngx_strcmp(v->u.object.keys[i], "include_usage") != 0) {
            continue;
        }

        rc = ngx_http_srt_get_bool(ps, v->u.object.values[i],
                                   "stream_options.include_usage", &flag);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_OK) {
            ps->p->include_usage = flag;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_logprobs(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    ngx_int_t               rc;
    long long               n = 0;
    ngx_flag_t              flag = 0;
    ngx_http_srt_params_t  *p = ps->p;

    if (p->endpoint == NGX_HTTP_SRT_EP_CHAT) {
        rc = ngx_http_srt_get_bool(ps, v, f->name, &flag);
        if (rc == NGX_OK) {
            p->logprobs = flag;
        }

    } else {
        rc = ngx_http_srt_row_int(ps, v, f, &n);
        if (rc == NGX_OK) {
            p->logprobs = 1;
            p->rq.sampling.top_logprobs = (int32_t) n;
        }
    }

    p->rq.sampling.logprobs = (int32_t) p->logprobs;

    return rc;
}


static ngx_int_t
ngx_http_srt_top_logprobs(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    ngx_int_t  rc;
    long long  n = 0;

    rc = ngx_http_srt_row_int(ps, v, f, &n);
    if (rc != NGX_OK) {
        return rc;
    }

    if (!ps->p->logprobs && n > 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "top_logprobs",
                                 "'top_logprobs' needs 'logprobs' set to "
                                 "true");
    }

    ps->p->rq.sampling.top_logprobs = (int32_t) n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_stop_token_ids(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    size_t                n;
    ngx_int_t             rc;
    srt_sampling_params  *sp = &ps->p->rq.sampling;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_DECLINED;
    }

    rc = ngx_http_srt_token_ids(ps, v, f->name, (size_t) f->max, ps->vocab,
                                sp->stop_ids, &n);
    if (rc != NGX_OK) {
        return rc;
    }

    sp->n_stop_ids = (int32_t) n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_logit_bias(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    size_t                i;
    double                d;
    ngx_int_t             rc;
    long long             id;
    const char           *key;
    srt_sampling_params  *sp = &ps->p->rq.sampling;

    if (v == NULL || YAJL_IS_NULL(v)) {
        return NGX_DECLINED;
    }

    if (!YAJL_IS_OBJECT(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "logit_bias",
                                 "'logit_bias' must be an object mapping "
                                 "token ids to numbers");
    }

    if (v->u.object.len > SRT_REQ_MAX_LOGIT_BIAS) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "logit_bias",
                                 "'logit_bias' may hold at most %d entries",
                                 SRT_REQ_MAX_LOGIT_BIAS);
    }

    for (i = 0; i < v->u.object.len; i++) {
        key = v->u.object.keys[i];
        id = ngx_atoi((u_char *) key, ngx_strlen(key));

        if (id == NGX_ERROR || (size_t) id >= ps->vocab) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "logit_bias",
                                     "'logit_bias' key \"%s\" is not a "
                                     "token id of this model", key);
        }

        rc = ngx_http_srt_get_number(ps, v->u.object.values[i], "logit_bias",
                                     f->min, f->max, 0, &d);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc != NGX_OK) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, "logit_bias",
                                     "'logit_bias' values must be numbers");
        }

        sp->logit_bias_ids[i] = (int32_t) id;
        sp->logit_bias[i] = (float) d;
    }

    sp->n_logit_bias = (int32_t) v->u.object.len;

    return NGX_OK;
}


/* a grammar decides where the output may end: EOS cannot be held back */

static ngx_int_t
ngx_http_srt_min_tokens(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    ngx_int_t              rc;
    long long              n = 0;
    const char            *param;
    ngx_http_srt_params_t  *p = ps->p;

    rc = ngx_http_srt_row_int(ps, v, f, &n);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (p->rq.grammar.kind != SRT_GRAMMAR_NONE
        && (p->rq.sampling.ignore_eos || (rc == NGX_OK && n > 0)))
    {
        param = p->rq.sampling.ignore_eos ? "ignore_eos" : "min_tokens";

        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, param,
                                 "'%s' cannot be combined with structured "
                                 "output (the grammar decides where the "
                                 "output ends)", param);
    }

    return rc;
}


static ngx_int_t
ngx_http_srt_required(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    if (v == NULL || YAJL_IS_NULL(v)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, f->name,
                                 "'%s' is required", f->name);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_messages_required(ngx_http_srt_parse_t *ps, yajl_val v,
    const ngx_http_srt_field_t *f)
{
    if (v == NULL || YAJL_IS_NULL(v)) {
        return ngx_http_srt_required(ps, v, f);
    }

    if (!YAJL_IS_ARRAY(v) || v->u.array.len == 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, f->name,
                                 "'%s' must be a non-empty array", f->name);
    }

    return NGX_OK;
}


/* The rows of one pass (flags & NGX_HTTP_SRT_FIELD_MODEL == pass), in order. */

static ngx_int_t
ngx_http_srt_walk(ngx_http_srt_parse_t *ps, ngx_uint_t pass)
{
    ngx_uint_t                   i, only;
    const ngx_http_srt_field_t  *f;

    only = ps->p->endpoint == NGX_HTTP_SRT_EP_CHAT
           ? NGX_HTTP_SRT_FIELD_COMPLETIONS : NGX_HTTP_SRT_FIELD_CHAT;

    for (i = 0; i < NGX_HTTP_SRT_NFIELDS; i++) {
        f = &ngx_http_srt_fields[i];

        if (f->set == NULL
            || (f->flags & NGX_HTTP_SRT_FIELD_MODEL) != pass
            || (f->flags & only))
        {
            continue;
        }

        if (f->set(ps, ps->vals[i], f) == NGX_ERROR) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* Each member of the body to its row, or to the unsupported table. */

static ngx_int_t
ngx_http_srt_collect(ngx_http_srt_parse_t *ps, yajl_val root)
{
    size_t       i;
    yajl_val     v;
    ngx_uint_t   k;
    const char  *key;

    for (i = 0; i < root->u.object.len; i++) {
        key = root->u.object.keys[i];
        v = root->u.object.values[i];

        for (k = 0; k < NGX_HTTP_SRT_NFIELDS; k++) {
            if (ngx_strcmp(key, ngx_http_srt_fields[k].name) == 0) {
                ps->vals[k] = v;    /* a repeated member: the last one */
                break;
            }
        }

        if (k == NGX_HTTP_SRT_NFIELDS
            && ngx_http_srt_unsupported_field(ps, key, v) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* The body to a JSON object, or a 400 saying why not. */

static ngx_int_t
ngx_http_srt_parse_json(ngx_http_srt_parse_t *ps, u_char *body, size_t len,
    yajl_val *root)
{
    char  yerr[256], *nl;

    if (len == 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "The request body is empty; expected a JSON "
                                 "object");
    }

    if (ngx_strlen(body) != len) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "Invalid JSON: the body contains a NUL "
                                 "byte");
    }

    /* yajl_tree_free and the walks below recurse once per level */
    if (srt_json_depth((const char *) body, len) > SRT_JSON_MAX_DEPTH) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "The request body nests arrays or objects "
                                 "deeper than %d levels", SRT_JSON_MAX_DEPTH);
    }

    yerr[0] = '\0';
    *root = yajl_tree_parse((const char *) body, yerr, sizeof(yerr));

    if (*root == NULL) {
        nl = ngx_strchr(yerr, '\n');
        if (nl) {
            *nl = '\0';
        }
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "Invalid JSON in the request body: %s",
                                 yerr[0] ? yerr : "parse error");
    }

    if (!YAJL_IS_OBJECT(*root)) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, NULL,
                                 "The request body must be a JSON object");
    }

    return NGX_OK;
}


/*
 * max_tokens (or max_completion_tokens, which wins) within what the context
 * leaves after the prompt; min_tokens within that.
 */

static ngx_int_t
ngx_http_srt_budget(ngx_http_srt_parse_t *ps, size_t ctx_len)
{
    size_t                  max_new;
    yajl_val                v;
    ngx_int_t               rc;
    long long               n = 0;
    const char             *name, *what;
    ngx_http_srt_params_t  *p = ps->p;

    what = p->endpoint == NGX_HTTP_SRT_EP_CHAT ? "messages" : "prompt";
    max_new = ctx_len - p->n_prompt;

    name = "max_completion_tokens";
    v = ngx_http_srt_arg(ps, name);

    if (v == NULL || YAJL_IS_NULL(v)) {
        name = "max_tokens";
        v = ngx_http_srt_arg(ps, name);
    }

    rc = ngx_http_srt_get_int(ps, v, name, 1, NGX_MAX_INT32_VALUE, &n);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_OK) {
        if ((size_t) n > max_new) {
            return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, name,
                                     "This model's maximum context length "
                                     "is %uz tokens. However, you requested "
                                     "%uz tokens (%uz in the %s, %L in the "
                                     "completion). Please reduce the length "
                                     "of the %s or completion.",
                                     ctx_len, p->n_prompt + (size_t) n,
                                     p->n_prompt, what, n, what);
        }

        max_new = (size_t) n;
        p->max_tokens_set = 1;

    } else if (p->endpoint == NGX_HTTP_SRT_EP_COMPLETIONS && max_new > 16) {
        max_new = 16;   /* OpenAI's completions default */
    }

    p->rq.sampling.max_tokens = (int32_t) max_new;

    /* NGX_DECLINED: the model's shape is not published; not checked here */
    if (ngx_http_srt_activations_bound(ps, max_new) == NGX_ERROR) {
        return NGX_ERROR;
    }

    rc = ngx_http_srt_get_int(ps, ngx_http_srt_arg(ps, "min_tokens"),
                              "min_tokens", 0, (long long) max_new, &n);
    if (rc == NGX_OK) {
        p->rq.sampling.min_tokens = (int32_t) n;
    }

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


/* The fields that need nothing but the body. */

static ngx_int_t
ngx_http_srt_parse_fields(ngx_http_srt_parse_t *ps, yajl_val root)
{
    ngx_http_srt_params_t  *p = ps->p;

    if (ngx_http_srt_collect(ps, root) != NGX_OK) {
        return NGX_ERROR;
    }

    p->rq.sampling.temperature = 1.0f;
    p->rq.sampling.top_p = 1.0f;
    p->rq.sampling.top_k = -1;
    p->rq.sampling.repetition_penalty = 1.0f;
    p->n = 1;

    return ngx_http_srt_walk(ps, 0);
}


/*
 * What needs the model: the vocabulary-sized fields, then, once the scheduler
 * is ready, the prompt. NGX_DECLINED: the model or its scheduler is not there
 * (yet); the caller parks the request or answers 503. A parked request comes
 * back here with its body as it was parsed: the fields above are not checked
 * again, and these are checked against the model as it is now.
 */

static ngx_int_t
ngx_http_srt_parse_prompt(ngx_http_srt_parse_t *ps)
{
    int                     state;
    size_t                  ctx_len;
    ngx_int_t               rc;
    const char             *what;
    srt_chan_model_info     info;
    ngx_http_srt_model_t   *m = ps->m;
    ngx_http_srt_params_t  *p = ps->p;

    if (m->load_error.len || m->tok == NULL) {
        return NGX_DECLINED;
    }

    ps->vocab = srt_tokenizer_vocab_size(m->tok);
    if (srt_chan_model_info_get(m->chan, &info) == SRT_OK
        && (size_t) info.vocab_size > ps->vocab)
    {
        ps->vocab = info.vocab_size;
    }

    if (ngx_http_srt_walk(ps, NGX_HTTP_SRT_FIELD_MODEL) != NGX_OK) {
        return NGX_ERROR;
    }

    /* the scheduler must be there before we spend time on the prompt */

    state = srt_chan_sched_state_get(m->chan, NULL, 0);
    if (ngx_process == NGX_PROCESS_SINGLE
        || (state != SRT_CHAN_SCHED_READY && state != SRT_CHAN_SCHED_HANDOVER))
    {
        return NGX_DECLINED;
    }

    ctx_len = (size_t) srt_chan_get_config(m->chan)->slot_tokens;
    if (srt_chan_model_info_get(m->chan, &info) == SRT_OK
        && info.context_length > 0 && (size_t) info.context_length < ctx_len)
    {
        ctx_len = info.context_length;
    }

    if (p->endpoint == NGX_HTTP_SRT_EP_CHAT) {
        what = "messages";
        rc = ngx_http_srt_render_chat(ps, ngx_http_srt_arg(ps, "messages"),
                                      ngx_http_srt_arg(ps, "tools"));
    } else {
        what = "prompt";
        rc = ngx_http_srt_prompt(ps, ngx_http_srt_arg(ps, "prompt"), ctx_len,
                                 ps->vocab);
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    if (p->n_prompt == 0) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, what,
                                 "The prompt is empty");
    }

    if (p->n_prompt >= ctx_len) {
        return ngx_http_srt_fail(ps, NGX_HTTP_BAD_REQUEST, what,
                                 "This model's maximum context length is %uz "
                                 "tokens. However, your prompt has %uz tokens. "
                                 "Please reduce the length of the %s.",
                                 ctx_len, p->n_prompt, what);
    }

    return ngx_http_srt_budget(ps, ctx_len);
}


static void
ngx_http_srt_parse_cleanup(void *data)
{
    ngx_http_srt_parse_t  *ps = data;

    if (ps->root) {
        yajl_tree_free(ps->root);
        ps->root = NULL;
    }
}


/* A request that waits for its model keeps the parsed body, not the text. */

static ngx_int_t
ngx_http_srt_park_parse(ngx_http_srt_parse_t *ps,
    ngx_http_srt_parse_t **parked)
{
    ngx_http_srt_parse_t  *saved;
    ngx_pool_cleanup_t    *cln;

    saved = ngx_palloc(ps->r->pool, sizeof(ngx_http_srt_parse_t)
                                    + NGX_HTTP_SRT_NFIELDS * sizeof(yajl_val));
    if (saved == NULL) {
        return NGX_ERROR;
    }

    cln = ngx_pool_cleanup_add(ps->r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    *saved = *ps;
    saved->vals = (yajl_val *) (saved + 1);
    ngx_memcpy(saved->vals, ps->vals, NGX_HTTP_SRT_NFIELDS * sizeof(yajl_val));

    cln->handler = ngx_http_srt_parse_cleanup;
    cln->data = saved;

    *parked = saved;

    return NGX_DECLINED;
}


/*
 * *parked NULL: the body is parsed and checked. NGX_DECLINED sets *parked:
 * the model is not ready, and a later call with it (body unused) continues
 * where this one stopped, without parsing, rendering or tokenizing twice.
 * Any other return leaves *parked NULL; NGX_ERROR with *status etc. set.
 */

ngx_int_t
ngx_http_srt_parse_request(ngx_http_request_t *r, ngx_http_srt_model_t *m,
    u_char *body, size_t len, ngx_http_srt_params_t *p,
    ngx_http_srt_parse_t **parked, ngx_uint_t *status, const char **param,
    char *errbuf, size_t errlen)
{
    yajl_val              vals[NGX_HTTP_SRT_NFIELDS];
    ngx_int_t             rc;
    ngx_http_srt_parse_t  ps, *pp;

    if (*parked) {
        pp = *parked;

    } else {
        ngx_memzero(vals, sizeof(vals));
        ngx_memzero(&ps, sizeof(ngx_http_srt_parse_t));

        ps.r = r;
        ps.m = m;
        ps.p = p;
        ps.vals = vals;
        pp = &ps;
    }

    pp->status = status;
    pp->param = param;
    pp->errbuf = errbuf;
    pp->errlen = errlen;

    if (*parked == NULL) {
        rc = ngx_http_srt_parse_json(pp, body, len, &pp->root);

        if (rc == NGX_OK) {
            rc = ngx_http_srt_parse_fields(pp, pp->root);
        }

        if (rc != NGX_OK) {
            ngx_http_srt_parse_cleanup(pp);
            return NGX_ERROR;
        }
    }

    rc = ngx_http_srt_parse_prompt(pp);

    if (rc == NGX_DECLINED) {
        if (*parked || ngx_http_srt_park_parse(pp, parked) == NGX_DECLINED) {
            return NGX_DECLINED;
        }

        rc = ngx_http_srt_fail(pp, NGX_HTTP_INTERNAL_SERVER_ERROR, NULL,
                               "Out of memory");
    }

    ngx_http_srt_parse_cleanup(pp);
    *parked = NULL;

    return rc;
}
