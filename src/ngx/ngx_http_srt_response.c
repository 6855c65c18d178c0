/*
 * Responses: token ids from the channel -> detokenized text -> OpenAI JSON or SSE.
 *
 * Text is decoded incrementally (srt_detok, never half a UTF-8 character). Stop strings
 * are matched on the decoded text and cut as OpenAI does: the completion ends before the
 * stop string, which is not returned. While streaming, the last (longest stop - 1)
 * bytes are held back so that a stop string split across tokens is never half-sent.
 */

#include "ngx_http_srt_module.h"


static ngx_int_t ngx_http_srt_send_chunk(ngx_http_srt_ctx_t *ctx, yajl_gen g,
    ngx_chain_t ***last);
static void ngx_http_srt_write_handler(ngx_http_request_t *r);


void
ngx_http_srt_gen_str(yajl_gen g, const char *s)
{
    yajl_gen_string(g, (const unsigned char *) s, ngx_strlen(s));
}


void
ngx_http_srt_gen_ngx_str(yajl_gen g, ngx_str_t *s)
{
    yajl_gen_string(g, s->data, s->len);
}


void
ngx_http_srt_gen_num(yajl_gen g, double v)
{
    char  buf[64];
    int   n;

    if (v != v || v > 1e300 || v < -1e300) {
        /* JSON has no NaN or infinity: a token the model rules out */
        v = -9999.0;
    }

    n = snprintf(buf, sizeof(buf), "%.6g", v);
    yajl_gen_number(g, buf, n);
}


void
ngx_http_srt_gen_int(yajl_gen g, long long v)
{
    yajl_gen_integer(g, v);
}


/* Copy the generated JSON into the request pool and free the generator. */

static ngx_buf_t *
ngx_http_srt_gen_buf(ngx_http_request_t *r, yajl_gen g, const char *prefix,
    const char *suffix)
{
    size_t                plen, slen, len;
    ngx_buf_t            *b;
    const unsigned char  *json;

    yajl_gen_get_buf(g, &json, &len);

    plen = ngx_strlen(prefix);
    slen = ngx_strlen(suffix);

    b = ngx_create_temp_buf(r->pool, plen + len + slen);
    if (b == NULL) {
        yajl_gen_free(g);
        return NULL;
    }

    b->last = ngx_cpymem(b->last, prefix, plen);
    b->last = ngx_cpymem(b->last, json, len);
    b->last = ngx_cpymem(b->last, suffix, slen);

    yajl_gen_free(g);

    return b;
}


ngx_int_t
ngx_http_srt_send_json(ngx_http_request_t *r, ngx_uint_t status, yajl_gen g)
{
    ngx_int_t    rc;
    ngx_buf_t   *b;
    ngx_chain_t  out;

    b = ngx_http_srt_gen_buf(r, g, "", "\n");
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = status;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    /* nginx's own rules for its error pages: the connection stays usable
     * after a 4xx/503 whose body was read or discarded */
    switch (status) {
    case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
    case NGX_HTTP_REQUEST_URI_TOO_LARGE:
    case NGX_HTTP_INTERNAL_SERVER_ERROR:
    case NGX_HTTP_NOT_IMPLEMENTED:
        r->keepalive = 0;
        break;
    default:
        break;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/*
 * A response header; key and value are static strings or the request pool's
 * (value NULL: empty, for the caller to fill).
 */

ngx_table_elt_t *
ngx_http_srt_add_header(ngx_http_request_t *r, char *key, char *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NULL;
    }

    h->hash = 1;
    h->key.len = ngx_strlen(key);
    h->key.data = (u_char *) key;

    if (value == NULL) {
        ngx_str_null(&h->value);

    } else {
        h->value.len = ngx_strlen(value);
        h->value.data = (u_char *) value;
    }

    return h;
}


/* ---- decoding ---- */

static ngx_int_t
ngx_http_srt_append(ngx_http_request_t *r, ngx_http_srt_choice_t *ch,
    const char *s, size_t n);


/* Cut the text at the earliest stop string found in the new part; 1 if cut. */

static ngx_int_t
ngx_http_srt_match_stop(ngx_http_srt_ctx_t *ctx, ngx_http_srt_choice_t *ch,
    size_t from)
{
    u_char      *best, *hit;
    ngx_uint_t   i;

    if (ctx->p.n_stop == 0) {
        return 0;
    }

    from = from > ctx->p.max_stop_len ? from - ctx->p.max_stop_len + 1 : 0;
    if (from < ch->emitted) {
        from = ch->emitted;
    }

    best = NULL;

    for (i = 0; i < ctx->p.n_stop; i++) {
        hit = NULL;

        {
            u_char  *s, *end;

            end = ch->text + ch->text_len;
            for (s = ch->text + from;
                 s + ctx->p.stop[i].len <= end;
                 s++)
            {
                if (*s == ctx->p.stop[i].data[0]
                    && ngx_memcmp(s, ctx->p.stop[i].data, ctx->p.stop[i].len)
                       == 0)
                {
                    hit = s;
                    break;
                }
            }
        }

        if (hit && (best == NULL || hit < best)) {
            best = hit;
        }
    }

    if (best == NULL) {
        return 0;
    }

    ch->text_len = best - ch->text;

    return 1;
}


/*
 * The chat answer split into reasoning_content, content and tool_calls by the output
 * parser (srt/output_parse.h) the request chose: fed the text as it is decided (the
 * same bytes a stream would send), the last time whole. A stream sends what each feed
 * added; the JSON answer what the last one left: the same decisions either way.
 */

typedef struct {
    u_char     *data;
    size_t      len;
    size_t      cap;
    size_t      sent;        /* bytes already streamed */
} ngx_http_srt_gbuf_t;


typedef struct {
    ngx_http_srt_gbuf_t  name;
    ngx_http_srt_gbuf_t  args;  /* arguments, the JSON string's value */
} ngx_http_srt_tool_call_t;


typedef struct ngx_http_srt_parsed_s {
    srt_outparse         op;
    ngx_pool_t          *pool;
    ngx_http_srt_gbuf_t  reasoning;
    ngx_http_srt_gbuf_t  content;
    ngx_array_t          calls;   /* ngx_http_srt_tool_call_t */
    ngx_uint_t           calls_sent;  /* calls whose first chunk was streamed */
} ngx_http_srt_parsed_t;


static ngx_int_t
ngx_http_srt_grow(ngx_pool_t *pool, u_char **data, size_t *len, size_t *cap,
    const u_char *s, size_t n)
{
    u_char  *p;
    size_t   c;

    if (n == 0) {
        return NGX_OK;
    }

    if (*len + n > *cap) {
        c = ngx_max(*cap * 2, *len + n + 256);
        p = ngx_pnalloc(pool, c);
        if (p == NULL) {
            return NGX_ERROR;
        }

        if (*len) {
            ngx_memcpy(p, *data, *len);
        }

        *data = p;
        *cap = c;
    }

    ngx_memcpy(*data + *len, s, n);
    *len += n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_append(ngx_http_request_t *r, ngx_http_srt_choice_t *ch,
    const char *s, size_t n)
{
    return ngx_http_srt_grow(r->pool, &ch->text, &ch->text_len, &ch->text_cap,
                             (const u_char *) s, n);
}


static ngx_flag_t
ngx_http_srt_parsing(ngx_http_srt_ctx_t *ctx)
{
    return ctx->p.endpoint == NGX_HTTP_SRT_EP_CHAT
           && (ctx->p.tools || ctx->p.reasoning != SRT_REASONING_OFF);
}


static int
ngx_http_srt_parsed_sink(void *user, srt_out_event ev, const char *s, size_t n)
{
    ngx_http_srt_gbuf_t       *b;
    ngx_http_srt_parsed_t     *pd = user;
    ngx_http_srt_tool_call_t  *tc;

    switch (ev) {

    case SRT_OUT_REASONING:
        b = &pd->reasoning;
        break;

    case SRT_OUT_CONTENT:
        b = &pd->content;
        break;

    case SRT_OUT_CALL_BEGIN:
        tc = ngx_array_push(&pd->calls);
        if (tc == NULL) {
            return SRT_ERROR;
        }
        ngx_memzero(tc, sizeof(ngx_http_srt_tool_call_t));
        b = &tc->name;
        break;

    default:
        if (pd->calls.nelts == 0) {
            return SRT_ERROR;
        }
        tc = pd->calls.elts;
        b = &tc[pd->calls.nelts - 1].args;
    }

    return ngx_http_srt_grow(pd->pool, &b->data, &b->len, &b->cap,
                             (const u_char *) s, n) == NGX_OK
           ? SRT_OK : SRT_ERROR;
}


/* Feed the parser the first end bytes of the choice's text. */

static ngx_int_t
ngx_http_srt_parse_output(ngx_http_srt_ctx_t *ctx, ngx_http_srt_choice_t *ch,
    size_t end, ngx_flag_t done)
{
    ngx_http_srt_parsed_t  *pd = ch->parsed;

    if (pd == NULL) {
        pd = ngx_pcalloc(ctx->request->pool, sizeof(ngx_http_srt_parsed_t));
        if (pd == NULL
            || ngx_array_init(&pd->calls, ctx->request->pool, 2,
                              sizeof(ngx_http_srt_tool_call_t))
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        pd->pool = ctx->request->pool;
        srt_outparse_init(&pd->op, ctx->p.tools ? ctx->p.tool_format
                                                : SRT_TOOLS_OFF,
                          ctx->p.reasoning, (int) ctx->p.think_open);
        srt_outparse_limit(&pd->op, ctx->p.one_call && ctx->p.tools ? 1 : 0);
        ch->parsed = pd;
    }

    if (srt_outparse_feed(&pd->op, ch->text ? (const char *) ch->text : "",
                          end, (int) done, ngx_http_srt_parsed_sink, pd)
        != SRT_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static int
ngx_http_srt_watch_sink(void *user, srt_out_event ev, const char *s, size_t n)
{
    return SRT_OK;
}


/*
 * parallel_tool_calls false: a parser of its own follows the text token by
 * token and says where the first call is complete; the text ends there, as at
 * a stop string, so the model spends no tokens on a second call. The parser
 * of the answer, under the same limit, reads the cut text the same way.
 * 1 when the text was cut.
 */

static ngx_int_t
ngx_http_srt_match_one_call(ngx_http_srt_ctx_t *ctx, ngx_http_srt_choice_t *ch)
{
    size_t  end;

    if (ch->watch == NULL) {
        ch->watch = ngx_palloc(ctx->request->pool, sizeof(srt_outparse));
        if (ch->watch == NULL) {
            return NGX_ERROR;
        }

        srt_outparse_init(ch->watch, ctx->p.tool_format, ctx->p.reasoning,
                          (int) ctx->p.think_open);
        srt_outparse_limit(ch->watch, 1);
    }

    if (srt_outparse_feed(ch->watch, ch->text ? (const char *) ch->text : "",
                          ch->text_len, 0, ngx_http_srt_watch_sink, NULL)
        != SRT_OK)
    {
        return NGX_ERROR;
    }

    if (!srt_outparse_limit_reached(ch->watch, &end)) {
        return 0;
    }

    ch->text_len = end;

    return 1;
}


/* finish_reason: "tool_calls" when the model stopped after making calls */

static const char *
ngx_http_srt_finish_reason(ngx_http_srt_choice_t *ch)
{
    if (ch->parsed && ch->parsed->calls.nelts
        && (ch->finish == NULL || ngx_strcmp(ch->finish, "stop") == 0))
    {
        return "tool_calls";
    }

    return ch->finish ? ch->finish : "stop";
}


/* A call's id: Mistral's templates and tokenizers take 9 alphanumerics; the
 * others the usual "call_..." form. Unique per request, choice and call. */

static void
ngx_http_srt_gen_call_id(ngx_http_srt_ctx_t *ctx, yajl_gen g, ngx_uint_t choice,
    ngx_uint_t k)
{
    u_char    id[64], *e;
    uint32_t  h;
    ngx_uint_t  j;

    static const char  an[] = "abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

    ngx_http_srt_gen_str(g, "id");

    if (ctx->p.tool_format == SRT_TOOLS_MISTRAL) {
        e = ngx_snprintf(id, sizeof(id), "%s_%ui_%ui", ctx->id, choice, k);
        h = ngx_crc32_short(id, e - id);
        for (j = 0; j < 9; j++) {
            id[j] = an[h % (sizeof(an) - 1)];
            h = h / (sizeof(an) - 1) ^ (h * 2654435761u) ^ (uint32_t) j;
        }
        yajl_gen_string(g, id, 9);
        return;
    }

    e = ngx_snprintf(id, sizeof(id), "call_%s_%ui_%ui", ctx->id + 9, choice, k);
    yajl_gen_string(g, id, e - id);
}


/* The message's fields after "role": content, reasoning_content, tool_calls. */

static void
ngx_http_srt_gen_message(ngx_http_srt_ctx_t *ctx, ngx_uint_t choice,
    yajl_gen g)
{
    ngx_uint_t                 k;
    ngx_http_srt_choice_t     *ch = &ctx->choices[choice];
    ngx_http_srt_parsed_t     *pd = ch->parsed;
    ngx_http_srt_tool_call_t  *tc;

    ngx_http_srt_gen_str(g, "content");

    if (pd == NULL) {
        yajl_gen_string(g, ch->text ? ch->text : (u_char *) "", ch->text_len);
        return;
    }

    if (pd->calls.nelts && pd->content.len == 0) {
        yajl_gen_null(g);
    } else {
        yajl_gen_string(g, pd->content.data ? pd->content.data
                                            : (u_char *) "",
                        pd->content.len);
    }

    if (ctx->p.reasoning != SRT_REASONING_OFF) {
        ngx_http_srt_gen_str(g, "reasoning_content");
        if (pd->reasoning.len) {
            yajl_gen_string(g, pd->reasoning.data, pd->reasoning.len);
        } else {
            yajl_gen_null(g);
        }
    }

    if (pd->calls.nelts == 0) {
        return;
    }

    tc = pd->calls.elts;

    ngx_http_srt_gen_str(g, "tool_calls");
    yajl_gen_array_open(g);
    for (k = 0; k < pd->calls.nelts; k++) {
        yajl_gen_map_open(g);
        ngx_http_srt_gen_call_id(ctx, g, choice, k);
        ngx_http_srt_gen_str(g, "type");
        ngx_http_srt_gen_str(g, "function");
        ngx_http_srt_gen_str(g, "function");
        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "name");
        yajl_gen_string(g, tc[k].name.data, tc[k].name.len);
        ngx_http_srt_gen_str(g, "arguments");
        yajl_gen_string(g, tc[k].args.data ? tc[k].args.data : (u_char *) "",
                        tc[k].args.len);
        yajl_gen_map_close(g);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
}


/* How much of the held text may be sent now: all of it at the end; otherwise all
 * but a possible stop-string prefix, and never half a UTF-8 character. */

static size_t
ngx_http_srt_sendable(ngx_http_srt_ctx_t *ctx, ngx_http_srt_choice_t *ch)
{
    size_t  end, hold;

    if (ch->done) {
        return ch->text_len;
    }

    hold = ctx->p.max_stop_len ? ctx->p.max_stop_len - 1 : 0;
    end = ch->text_len > hold ? ch->text_len - hold : 0;

    if (end < ch->emitted) {
        return ch->emitted;
    }

    while (end > ch->emitted && end < ch->text_len
           && (ch->text[end] & 0xc0) == 0x80)
    {
        end--;
    }

    return end;
}


static ngx_flag_t
ngx_http_srt_is_stop_id(ngx_http_srt_ctx_t *ctx, int32_t id)
{
    int32_t  i;

    for (i = 0; i < ctx->p.rq.sampling.n_stop_ids; i++) {
        if (ctx->p.rq.sampling.stop_ids[i] == id) {
            return 1;
        }
    }

    return 0;
}


static ngx_int_t
ngx_http_srt_take_tokens(ngx_http_srt_ctx_t *ctx, ngx_http_srt_choice_t *ch)
{
    char                    *buf;
    size_t                   n, before, cap;
    uint32_t                 k;
    srt_err                  err;
    ngx_int_t                rc;
    srt_chan_output          o;
    ngx_http_request_t      *r;
    ngx_http_srt_model_t    *m;
    ngx_http_srt_logprob_t  *lp;

    r = ctx->request;
    m = ctx->model;

    if (srt_chan_read(m->chan, ch->slot, ch->gen, &o) != SRT_OK) {
        ch->done = 1;
        ch->live = 0;
        ch->error = 1;
        ch->errmsg = "the request slot was lost";
        return NGX_OK;
    }

    if (ctx->detok_buf == NULL) {
        ctx->detok_cap = srt_detok_max_out(m->tok);
        ctx->detok_buf = ngx_palloc(r->pool, ctx->detok_cap);
        if (ctx->detok_buf == NULL) {
            return NGX_ERROR;
        }
    }

    buf = ctx->detok_buf;
    cap = ctx->detok_cap;

    for (k = ch->consumed; k < o.n_out; k++) {
        before = ch->text_len;

        if (ngx_http_srt_is_stop_id(ctx, o.ids[k])) {
            if (o.finish == SRT_FINISH_NONE && k + 1 == o.n_out) {
                /* maybe the token that ends it: its text is not part of the output */
                break;
            }

            if (o.finish == SRT_FINISH_STOP && k + 1 == o.n_out
                && o.stop_id == o.ids[k])
            {
                ch->n_tokens++;
                continue;
            }
        }

        if (srt_detok_push(&ch->detok, o.ids[k], buf, cap, &n, &err)
            != SRT_OK)
        {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "srt: detokenizer: %s", err.msg);
            n = 0;
        }

        if (ngx_http_srt_append(r, ch, buf, n) != NGX_OK) {
            return NGX_ERROR;
        }

        ch->n_tokens++;

        if (ctx->p.logprobs) {
            if (ch->lp == NULL) {
                ch->lp = ngx_array_create(r->pool, 16,
                                          sizeof(ngx_http_srt_logprob_t));
                if (ch->lp == NULL) {
                    return NGX_ERROR;
                }
            }

            lp = ngx_array_push(ch->lp);
            if (lp == NULL) {
                return NGX_ERROR;
            }

            lp->id = o.ids[k];
            lp->logprob = o.logprobs[k];
            lp->offset = before;
            lp->n_top = 0;

            if (ctx->p.rq.sampling.top_logprobs > 0) {
                lp->n_top = srt_chan_read_top(m->chan, ch->slot, ch->gen, k,
                                              lp->top_ids, lp->top_lps,
                                              (uint32_t)
                                              ctx->p.rq.sampling.top_logprobs);
            }
        }

        rc = ngx_http_srt_match_stop(ctx, ch, before);

        if (rc == 0 && ctx->p.one_call && ctx->p.tools
            && ngx_http_srt_parsing(ctx))
        {
            rc = ngx_http_srt_match_one_call(ctx, ch);
            if (rc == NGX_ERROR) {
                return NGX_ERROR;
            }
        }

        if (rc) {
            ch->consumed = k + 1;
            ch->finish = "stop";
            ch->done = 1;
            return NGX_OK;
        }
    }

    ch->consumed = k;

    if (o.finish == SRT_FINISH_NONE) {
        return NGX_OK;
    }

    before = ch->text_len;

    if (srt_detok_flush(&ch->detok, buf, cap, &n, &err) == SRT_OK) {
        if (ngx_http_srt_append(r, ch, buf, n) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    ch->done = 1;
    ch->cached = o.cached_tokens;
    ch->t_submit_ns = o.t_submit_ns;
    ch->t_pop_ns = o.t_pop_ns;
    ch->t_done_ns = o.t_done_ns;
    ch->t_seen_ns = srt_chan_now_ns();

    if (ngx_http_srt_match_stop(ctx, ch, before)) {
        ch->finish = "stop";
        return NGX_OK;
    }

    switch (o.finish) {

    case SRT_FINISH_STOP:
    case SRT_FINISH_LENGTH:
        ch->finish = o.finish == SRT_FINISH_STOP ? "stop" : "length";

        if (ctx->p.rq.acts.n > 0) {
            /* copied now: the slot goes back when the choice is done */
            const void  *a = srt_chan_read_act(m->chan, ch->slot, ch->gen,
                                               &n);

            ch->act = (a && n) ? ngx_pnalloc(r->pool, n) : NULL;
            if (ch->act == NULL) {
                ch->error = 1;
                ch->errmsg = (a && n) ? "out of memory"
                                      : "the activations did not arrive";
                break;
            }
            ngx_memcpy(ch->act, a, n);
            ch->act_len = n;
        }
        break;

    case SRT_FINISH_ABORT:
        ch->finish = "abort";
        ch->error = 1;
        ch->errmsg = "the request was aborted by the server";
        break;

    default:
        ch->finish = "error";
        ch->error = 1;
        {
            size_t  len = ngx_strlen(o.errmsg);
            char   *e = ngx_pnalloc(r->pool, len + 1);

            if (e) {
                ngx_memcpy(e, o.errmsg, len + 1);
            }
            ch->errmsg = e ? e : "internal error";
        }
        break;
    }

    return NGX_OK;
}


/* ---- returned activations ---- */

/*
 * "activations": [{"module", "reduce", "dtype", "shape", "data"}] of one
 * choice, from the records the scheduler wrote (srt_act_record + data, in
 * the order of the request's "return_activations"); data is base64 of the
 * little-endian tensor, row-major.
 */
static ngx_int_t
ngx_http_srt_gen_activations(ngx_http_srt_ctx_t *ctx,
    ngx_http_srt_choice_t *ch, yajl_gen g)
{
    size_t                    off;
    ngx_str_t                 src, dst;
    srt_act_record            rec;
    const srt_act_spec       *sp;
    srt_request_activations  *ra;

    static const char  *reduce[] = { "last", "mean", "all" };

    ra = &ctx->p.rq.acts;

    if (ra->n == 0) {
        return NGX_OK;
    }

    ngx_http_srt_gen_str(g, "activations");
    yajl_gen_array_open(g);

    for (off = 0; ch->act && off + sizeof(rec) <= ch->act_len; ) {
        ngx_memcpy(&rec, ch->act + off, sizeof(rec));
        off += sizeof(rec);

        if (rec.spec < 0 || rec.spec >= ra->n
            || rec.bytes > ch->act_len - off
            || rec.rows < 0 || rec.cols <= 0
            || rec.bytes != (uint64_t) rec.rows * (uint64_t) rec.cols
                            * (rec.dtype == SRT_ACT_F16 ? 2 : 4))
        {
            ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                          "srt: malformed activation record");
            return NGX_ERROR;
        }

        sp = &ra->spec[rec.spec];

        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "module");
        ngx_http_srt_gen_str(g, sp->module);
        ngx_http_srt_gen_str(g, "reduce");
        ngx_http_srt_gen_str(g, reduce[sp->reduce]);
        ngx_http_srt_gen_str(g, "dtype");
        ngx_http_srt_gen_str(g, rec.dtype == SRT_ACT_F16 ? "f16" : "f32");
        ngx_http_srt_gen_str(g, "shape");
        yajl_gen_array_open(g);
        if (sp->reduce == SRT_ACT_ALL) {
            yajl_gen_integer(g, rec.rows);
        }
        yajl_gen_integer(g, rec.cols);
        yajl_gen_array_close(g);

        src.data = ch->act + off;
        src.len = (size_t) rec.bytes;
        dst.len = ngx_base64_encoded_length(src.len);
        dst.data = ngx_pnalloc(ctx->request->pool, dst.len ? dst.len : 1);
        if (dst.data == NULL) {
            return NGX_ERROR;
        }
        ngx_encode_base64(&dst, &src);

        ngx_http_srt_gen_str(g, "data");
        yajl_gen_string(g, dst.data, dst.len);
        yajl_gen_map_close(g);

        off += (size_t) ((rec.bytes + 7) & ~(uint64_t) 7);
    }

    yajl_gen_array_close(g);

    return NGX_OK;
}


/* ---- logprobs ---- */

static void
ngx_http_srt_gen_token(yajl_gen g, ngx_http_srt_model_t *m, int32_t id,
    ngx_flag_t bytes)
{
    char        *text;
    size_t       len, rlen, i;
    srt_err      err;
    const char  *raw;

    if (srt_tokenizer_decode(m->tok, &id, 1, 0, &text, &len, &err) != SRT_OK) {
        text = NULL;
        len = 0;
    }

    yajl_gen_string(g, (const unsigned char *) (text ? text : ""), len);

    if (bytes) {
        /* the token's own bytes, which may be part of a UTF-8 character: the text above
         * shows such a part as U+FFFD, the bytes must not */
        raw = srt_tokenizer_token_bytes(m->tok, id, &rlen);
        if (raw == NULL) {
            raw = text ? text : "";
            rlen = len;
        }

        ngx_http_srt_gen_str(g, "bytes");
        yajl_gen_array_open(g);
        for (i = 0; i < rlen; i++) {
            yajl_gen_integer(g, (unsigned char) raw[i]);
        }
        yajl_gen_array_close(g);
    }

    free(text);
}


static void
ngx_http_srt_gen_logprobs(ngx_http_srt_ctx_t *ctx, ngx_http_srt_choice_t *ch,
    yajl_gen g, ngx_uint_t from, ngx_uint_t to)
{
    ngx_uint_t               i, j;
    ngx_http_srt_logprob_t  *lp;

    ngx_http_srt_gen_str(g, "logprobs");

    if (!ctx->p.logprobs || ch->lp == NULL) {
        yajl_gen_null(g);
        return;
    }

    lp = ch->lp->elts;

    if (ctx->p.endpoint == NGX_HTTP_SRT_EP_CHAT) {
        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "content");
        yajl_gen_array_open(g);

        for (i = from; i < to; i++) {
            yajl_gen_map_open(g);
            ngx_http_srt_gen_str(g, "token");
            ngx_http_srt_gen_token(g, ctx->model, lp[i].id, 1);
            ngx_http_srt_gen_str(g, "logprob");
            ngx_http_srt_gen_num(g, lp[i].logprob);
            ngx_http_srt_gen_str(g, "top_logprobs");
            yajl_gen_array_open(g);
            for (j = 0; j < lp[i].n_top; j++) {
                yajl_gen_map_open(g);
                ngx_http_srt_gen_str(g, "token");
                ngx_http_srt_gen_token(g, ctx->model, lp[i].top_ids[j], 1);
                ngx_http_srt_gen_str(g, "logprob");
                ngx_http_srt_gen_num(g, lp[i].top_lps[j]);
                yajl_gen_map_close(g);
            }
            yajl_gen_array_close(g);
            yajl_gen_map_close(g);
        }

        yajl_gen_array_close(g);
        yajl_gen_map_close(g);
        return;
    }

    /* completions: parallel arrays */
    yajl_gen_map_open(g);

    ngx_http_srt_gen_str(g, "tokens");
    yajl_gen_array_open(g);
    for (i = from; i < to; i++) {
        ngx_http_srt_gen_token(g, ctx->model, lp[i].id, 0);
    }
    yajl_gen_array_close(g);

    ngx_http_srt_gen_str(g, "token_logprobs");
    yajl_gen_array_open(g);
    for (i = from; i < to; i++) {
        ngx_http_srt_gen_num(g, lp[i].logprob);
    }
    yajl_gen_array_close(g);

    ngx_http_srt_gen_str(g, "top_logprobs");
    yajl_gen_array_open(g);
    for (i = from; i < to; i++) {
        yajl_gen_map_open(g);
        for (j = 0; j < lp[i].n_top; j++) {
            ngx_http_srt_gen_token(g, ctx->model, lp[i].top_ids[j], 0);
            ngx_http_srt_gen_num(g, lp[i].top_lps[j]);
        }
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);

    ngx_http_srt_gen_str(g, "text_offset");
    yajl_gen_array_open(g);
    for (i = from; i < to; i++) {
        yajl_gen_integer(g, (long long) lp[i].offset);
    }
    yajl_gen_array_close(g);

    yajl_gen_map_close(g);
}


/* ---- output ---- */

static void
ngx_http_srt_gen_head(ngx_http_srt_ctx_t *ctx, yajl_gen g, const char *object)
{
    ngx_http_srt_gen_str(g, "id");
    ngx_http_srt_gen_str(g, (char *) ctx->id);
    ngx_http_srt_gen_str(g, "object");
    ngx_http_srt_gen_str(g, object);
    ngx_http_srt_gen_str(g, "created");
    yajl_gen_integer(g, (long long) ctx->created);
    ngx_http_srt_gen_str(g, "model");
    ngx_http_srt_gen_ngx_str(g, &ctx->model->name);
}


static void
ngx_http_srt_gen_usage(ngx_http_srt_ctx_t *ctx, yajl_gen g)
{
    ngx_uint_t  i, completion, cached;

    completion = 0;
    cached = 0;

    for (i = 0; i < ctx->n_choices; i++) {
        completion += ctx->choices[i].n_tokens;
        if (ctx->choices[i].cached > cached) {
            cached = ctx->choices[i].cached;
        }
    }

    ngx_http_srt_gen_str(g, "usage");
    yajl_gen_map_open(g);
    ngx_http_srt_gen_str(g, "prompt_tokens");
    yajl_gen_integer(g, (long long) ctx->p.n_prompt);
    ngx_http_srt_gen_str(g, "completion_tokens");
    yajl_gen_integer(g, (long long) completion);
    ngx_http_srt_gen_str(g, "total_tokens");
    yajl_gen_integer(g, (long long) (ctx->p.n_prompt + completion));
    ngx_http_srt_gen_str(g, "prompt_tokens_details");
    yajl_gen_map_open(g);
    ngx_http_srt_gen_str(g, "cached_tokens");
    yajl_gen_integer(g, (long long) cached);
    yajl_gen_map_close(g);
    yajl_gen_map_close(g);
}


static ngx_int_t
ngx_http_srt_send_stream_header(ngx_http_srt_ctx_t *ctx)
{
    ngx_int_t            rc;
    ngx_http_request_t  *r = ctx->request;

    r->headers_out.status = NGX_HTTP_OK;
    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    ngx_http_clear_content_length(r);

    if (ngx_http_srt_add_header(r, "Cache-Control", "no-cache") == NULL
        || ngx_http_srt_add_header(r, "X-Accel-Buffering", "no") == NULL)
    {
        return NGX_ERROR;
    }

    rc = ngx_http_send_header(r);
    ctx->header_sent = 1;

    r->write_event_handler = ngx_http_srt_write_handler;

    return rc;
}


/* One SSE event in a buffer recycled once nginx has sent it: a long stream does not
 * grow the request's pool by a buffer per token. */

static ngx_int_t
ngx_http_srt_send_chunk(ngx_http_srt_ctx_t *ctx, yajl_gen g,
    ngx_chain_t ***last)
{
    size_t                len, need;
    ngx_buf_t            *b;
    ngx_chain_t          *cl;
    const unsigned char  *json;

    yajl_gen_get_buf(g, &json, &len);
    need = sizeof("data: ") - 1 + len + 2;

    cl = ngx_chain_get_free_buf(ctx->request->pool, &ctx->free);
    if (cl == NULL) {
        yajl_gen_free(g);
        return NGX_ERROR;
    }

    b = cl->buf;

    if (b->start == NULL || (size_t) (b->end - b->start) < need) {
        b->start = ngx_palloc(ctx->request->pool, ngx_max(need, 1024));
        if (b->start == NULL) {
            yajl_gen_free(g);
            return NGX_ERROR;
        }
        b->end = b->start + ngx_max(need, 1024);
    }

    b->pos = b->start;
    b->last = ngx_cpymem(b->start, "data: ", sizeof("data: ") - 1);
    b->last = ngx_cpymem(b->last, json, len);
    *b->last++ = '\n';
    *b->last++ = '\n';
    b->temporary = 1;
    b->flush = 0;
    b->tag = (ngx_buf_tag_t) &ngx_http_srt_module;

    yajl_gen_free(g);

    cl->next = NULL;
    **last = cl;
    *last = &cl->next;

    return NGX_OK;
}


/* One chunk of a stream (object "chat.completion.chunk" or "text_completion"):
 * opened up to choice i's map. */

static yajl_gen
ngx_http_srt_chunk_open(ngx_http_srt_ctx_t *ctx, const char *object,
    ngx_uint_t i)
{
    yajl_gen  g;

    g = yajl_gen_alloc(NULL);
    if (g == NULL) {
        return NULL;
    }

    yajl_gen_map_open(g);
    ngx_http_srt_gen_head(ctx, g, object);
    ngx_http_srt_gen_str(g, "choices");
    yajl_gen_array_open(g);
    yajl_gen_map_open(g);
    ngx_http_srt_gen_str(g, "index");
    yajl_gen_integer(g, (long long) i);

    return g;
}


/* One chunk of a parsed chat stream: open up to the delta's map, close after it. */

static yajl_gen
ngx_http_srt_delta_open(ngx_http_srt_ctx_t *ctx, ngx_uint_t i)
{
    yajl_gen  g;

    g = ngx_http_srt_chunk_open(ctx, "chat.completion.chunk", i);
    if (g == NULL) {
        return NULL;
    }

    ngx_http_srt_gen_str(g, "delta");
    yajl_gen_map_open(g);

    return g;
}


static ngx_int_t
ngx_http_srt_delta_close(ngx_http_srt_ctx_t *ctx, ngx_http_srt_choice_t *ch,
    yajl_gen g, ngx_uint_t lp_to, const char *finish, ngx_chain_t ***last)
{
    yajl_gen_map_close(g);
    if (lp_to > ch->lp_emitted) {
        ngx_http_srt_gen_logprobs(ctx, ch, g, ch->lp_emitted, lp_to);
        ch->lp_emitted = lp_to;
    } else {
        ngx_http_srt_gen_str(g, "logprobs");
        yajl_gen_null(g);
    }
    ngx_http_srt_gen_str(g, "finish_reason");
    if (finish) {
        ngx_http_srt_gen_str(g, finish);
    } else {
        yajl_gen_null(g);
    }
    yajl_gen_map_close(g);
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);

    return ngx_http_srt_send_chunk(ctx, g, last);
}


/* "tool_calls": [{"index": k, ["id", "type", name], "function": {..., "arguments"}}] */

static void
ngx_http_srt_gen_call_delta(ngx_http_srt_ctx_t *ctx, ngx_uint_t i, yajl_gen g,
    ngx_uint_t k, ngx_flag_t first, ngx_flag_t open)
{
    ngx_http_srt_tool_call_t  *tc = ctx->choices[i].parsed->calls.elts;

    if (open) {
        ngx_http_srt_gen_str(g, "tool_calls");
        yajl_gen_array_open(g);
    }

    yajl_gen_map_open(g);
    ngx_http_srt_gen_str(g, "index");
    yajl_gen_integer(g, (long long) k);
    if (first) {
        ngx_http_srt_gen_call_id(ctx, g, i, k);
        ngx_http_srt_gen_str(g, "type");
        ngx_http_srt_gen_str(g, "function");
    }
    ngx_http_srt_gen_str(g, "function");
    yajl_gen_map_open(g);
    if (first) {
        ngx_http_srt_gen_str(g, "name");
        yajl_gen_string(g, tc[k].name.data, tc[k].name.len);
        ngx_http_srt_gen_str(g, "arguments");
        ngx_http_srt_gen_str(g, "");
    } else {
        ngx_http_srt_gen_str(g, "arguments");
        yajl_gen_string(g, tc[k].args.data + tc[k].args.sent,
                        tc[k].args.len - tc[k].args.sent);
        tc[k].args.sent = tc[k].args.len;
    }
    yajl_gen_map_close(g);
    yajl_gen_map_close(g);
}


/*
 * One chunk with call k's delta: its head and arguments "" (first) or its
 * arguments so far; finish: the chunk ends the choice with its finish_reason.
 */

static ngx_int_t
ngx_http_srt_send_call(ngx_http_srt_ctx_t *ctx, ngx_uint_t i, ngx_uint_t k,
    ngx_flag_t first, ngx_uint_t lp_to, ngx_flag_t finish, ngx_chain_t ***last)
{
    yajl_gen                g;
    ngx_http_srt_choice_t  *ch = &ctx->choices[i];

    g = ngx_http_srt_delta_open(ctx, i);
    if (g == NULL) {
        return NGX_ERROR;
    }

    ngx_http_srt_gen_call_delta(ctx, i, g, k, first, 1);
    yajl_gen_array_close(g);

    return ngx_http_srt_delta_close(ctx, ch, g, lp_to,
                                    finish ? ngx_http_srt_finish_reason(ch)
                                           : NULL,
                                    last);
}


/*
 * A parsed chat stream, as OpenAI streams it: reasoning_content and content as they
 * are decided; a call's first chunk carries index, id, type, name and arguments "",
 * the following ones its index and the arguments as they are generated; the last
 * chunk the finish_reason ("tool_calls" after calls).
 */

static ngx_int_t
ngx_http_srt_stream_parsed(ngx_http_srt_ctx_t *ctx, ngx_uint_t i,
    ngx_chain_t ***last, size_t end, ngx_uint_t lp_to)
{
    yajl_gen                   g;
    ngx_uint_t                 k, n;
    size_t                     reasoning_to;
    ngx_flag_t                 finish, any, open;
    ngx_http_srt_choice_t     *ch = &ctx->choices[i];
    ngx_http_srt_parsed_t     *pd;
    ngx_http_srt_tool_call_t  *tc;

    if (ch->error) {
        return NGX_OK;
    }

    if (ngx_http_srt_parse_output(ctx, ch, end, ch->done) != NGX_OK) {
        return NGX_ERROR;
    }

    ch->emitted = end;
    pd = ch->parsed;
    tc = pd->calls.elts;
    n = pd->calls.nelts;
    finish = ch->done;

    /* stream_reasoning false: the reasoning in one delta once it has ended */
    reasoning_to = ctx->p.hold_reasoning && !finish
                   && srt_outparse_in_reasoning(&pd->op)
                   ? pd->reasoning.sent : pd->reasoning.len;

    any = reasoning_to > pd->reasoning.sent
          || pd->content.len > pd->content.sent
          || lp_to > ch->lp_emitted;
    for (k = 0; k < pd->calls_sent; k++) {
        any = any || tc[k].args.len > tc[k].args.sent;
    }

    if (any || (finish && pd->calls_sent == n)) {
        g = ngx_http_srt_delta_open(ctx, i);
        if (g == NULL) {
            return NGX_ERROR;
        }

        if (reasoning_to > pd->reasoning.sent) {
            ngx_http_srt_gen_str(g, "reasoning_content");
            yajl_gen_string(g, pd->reasoning.data + pd->reasoning.sent,
                            reasoning_to - pd->reasoning.sent);
            pd->reasoning.sent = reasoning_to;
        }

        if (pd->content.len > pd->content.sent) {
            ngx_http_srt_gen_str(g, "content");
            yajl_gen_string(g, pd->content.data + pd->content.sent,
                            pd->content.len - pd->content.sent);
            pd->content.sent = pd->content.len;
        }

        open = 1;
        for (k = 0; k < pd->calls_sent; k++) {
            if (tc[k].args.len > tc[k].args.sent) {
                ngx_http_srt_gen_call_delta(ctx, i, g, k, 0, open);
                open = 0;
            }
        }
        if (!open) {
            yajl_gen_array_close(g);
        }

        if (ngx_http_srt_delta_close(ctx, ch, g, lp_to,
                                     finish && pd->calls_sent == n
                                     ? ngx_http_srt_finish_reason(ch) : NULL,
                                     last)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    for (k = pd->calls_sent; k < n; k++) {
        pd->calls_sent++;

        if (ngx_http_srt_send_call(ctx, i, k, 1, lp_to,
                                   finish && k + 1 == n
                                   && tc[k].args.len == 0, last)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (tc[k].args.len > 0
            && ngx_http_srt_send_call(ctx, i, k, 0, lp_to, finish && k + 1 == n,
                                      last)
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_stream_choice(ngx_http_srt_ctx_t *ctx, ngx_uint_t i,
    ngx_chain_t ***last)
{
    size_t                  end;
    yajl_gen                g;
    ngx_uint_t              lp_to;
    ngx_flag_t              chat, send_text, send_finish;
    ngx_http_srt_choice_t  *ch = &ctx->choices[i];

    chat = (ctx->p.endpoint == NGX_HTTP_SRT_EP_CHAT);

    if (chat && !ch->role_sent) {
        ch->role_sent = 1;

        g = ngx_http_srt_delta_open(ctx, i);
        if (g == NULL) {
            return NGX_ERROR;
        }

        ngx_http_srt_gen_str(g, "role");
        ngx_http_srt_gen_str(g, "assistant");
        ngx_http_srt_gen_str(g, "content");
        ngx_http_srt_gen_str(g, "");

        if (ngx_http_srt_delta_close(ctx, ch, g, ch->lp_emitted, NULL, last)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    end = ngx_http_srt_sendable(ctx, ch);
    lp_to = ch->lp ? ch->lp->nelts : 0;

    if (chat && ngx_http_srt_parsing(ctx)) {
        return ngx_http_srt_stream_parsed(ctx, i, last, end, lp_to);
    }

    send_text = (end > ch->emitted) || (lp_to > ch->lp_emitted);
    send_finish = ch->done && !ch->error;

    if (!send_text && !send_finish) {
        return NGX_OK;
    }

    g = ngx_http_srt_chunk_open(ctx, chat ? "chat.completion.chunk"
                                          : "text_completion", i);
    if (g == NULL) {
        return NGX_ERROR;
    }

    if (chat) {
        ngx_http_srt_gen_str(g, "delta");
        yajl_gen_map_open(g);
        if (end > ch->emitted) {
            ngx_http_srt_gen_str(g, "content");
            yajl_gen_string(g, ch->text + ch->emitted, end - ch->emitted);
        }
        yajl_gen_map_close(g);

    } else {
        ngx_http_srt_gen_str(g, "text");
        yajl_gen_string(g, ch->text + ch->emitted, end - ch->emitted);
    }

    ngx_http_srt_gen_logprobs(ctx, ch, g, ch->lp_emitted, lp_to);

    if (send_finish && ngx_http_srt_gen_activations(ctx, ch, g) != NGX_OK) {
        yajl_gen_free(g);
        return NGX_ERROR;
    }

    ngx_http_srt_gen_str(g, "finish_reason");
    if (send_finish) {
        ngx_http_srt_gen_str(g, ch->finish ? ch->finish : "stop");
    } else {
        yajl_gen_null(g);
    }

    yajl_gen_map_close(g);
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);

    ch->emitted = end;
    ch->lp_emitted = lp_to;

    return ngx_http_srt_send_chunk(ctx, g, last);
}


static ngx_int_t
ngx_http_srt_stream_end(ngx_http_srt_ctx_t *ctx, ngx_chain_t ***last)
{
    yajl_gen                g;
    ngx_buf_t              *b;
    ngx_uint_t              i;
    ngx_chain_t            *cl;
    ngx_http_srt_choice_t  *ch;

    for (i = 0; i < ctx->n_choices; i++) {
        ch = &ctx->choices[i];

        if (!ch->error) {
            continue;
        }

        g = yajl_gen_alloc(NULL);
        if (g == NULL) {
            return NGX_ERROR;
        }

        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "error");
        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "message");
        ngx_http_srt_gen_str(g, ch->errmsg ? ch->errmsg : "internal error");
        ngx_http_srt_gen_str(g, "type");
        ngx_http_srt_gen_str(g, "server_error");
        ngx_http_srt_gen_str(g, "param");
        yajl_gen_null(g);
        ngx_http_srt_gen_str(g, "code");
        yajl_gen_integer(g, NGX_HTTP_SERVICE_UNAVAILABLE);
        yajl_gen_map_close(g);
        yajl_gen_map_close(g);

        if (ngx_http_srt_send_chunk(ctx, g, last) != NGX_OK) {
            return NGX_ERROR;
        }

        break;
    }

    if (ctx->p.include_usage) {
        g = yajl_gen_alloc(NULL);
        if (g == NULL) {
            return NGX_ERROR;
        }

        yajl_gen_map_open(g);
        ngx_http_srt_gen_head(ctx, g,
                              ctx->p.endpoint == NGX_HTTP_SRT_EP_CHAT
                              ? "chat.completion.chunk" : "text_completion");
        ngx_http_srt_gen_str(g, "choices");
        yajl_gen_array_open(g);
        yajl_gen_array_close(g);
        ngx_http_srt_gen_usage(ctx, g);
        yajl_gen_map_close(g);

        if (ngx_http_srt_send_chunk(ctx, g, last) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    b = ngx_calloc_buf(ctx->request->pool);
    cl = ngx_alloc_chain_link(ctx->request->pool);
    if (b == NULL || cl == NULL) {
        return NGX_ERROR;
    }

    b->pos = (u_char *) "data: [DONE]\n\n";
    b->last = b->pos + sizeof("data: [DONE]\n\n") - 1;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    cl->buf = b;
    cl->next = NULL;
    **last = cl;
    *last = &cl->next;

    return NGX_OK;
}


/*
 * srt_server_timing on: where the time of a non-streamed request went, as
 * Server-Timing entries in milliseconds (the first choice's slot):
 *   srt-parse    body read -> queued (parse, validate, template, tokenize)
 *   srt-handoff  queued -> taken by the scheduler (doorbell, its wake-up)
 *   srt-model    taken -> finished (scheduling and the forward passes)
 *   srt-notify   finished -> seen by this worker (doorbell, worker wake-up)
 */
static ngx_int_t
ngx_http_srt_server_timing(ngx_http_srt_ctx_t *ctx)
{
    u_char                   *p;
    uint64_t                  d[4];
    ngx_uint_t                i;
    ngx_table_elt_t          *h;
    ngx_http_srt_choice_t    *ch;
    ngx_http_srt_loc_conf_t  *slcf;

    static const char  *names[4] = {
        "srt-parse", "srt-handoff", "srt-model", "srt-notify"
    };

    slcf = ngx_http_get_module_loc_conf(ctx->request, ngx_http_srt_module);
    ch = &ctx->choices[0];

    if (!slcf->server_timing || ctx->n_choices == 0 || ch->t_submit_ns == 0
        || ch->t_pop_ns < ch->t_submit_ns || ch->t_done_ns < ch->t_pop_ns
        || ch->t_seen_ns < ch->t_done_ns || ctx->t_body_ns > ch->t_submit_ns)
    {
        return NGX_OK;
    }

    d[0] = ch->t_submit_ns - ctx->t_body_ns;
    d[1] = ch->t_pop_ns - ch->t_submit_ns;
    d[2] = ch->t_done_ns - ch->t_pop_ns;
    d[3] = ch->t_seen_ns - ch->t_done_ns;

    h = ngx_http_srt_add_header(ctx->request, "Server-Timing", NULL);
    if (h == NULL) {
        return NGX_ERROR;
    }

    p = ngx_pnalloc(ctx->request->pool, 4 * sizeof("srt-handoff;dur=.000, ")
                                        + 4 * NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    h->value.data = p;

    for (i = 0; i < 4; i++) {
        /* microseconds shown as ms with three decimals */
        p = ngx_sprintf(p, "%s%s;dur=%uL.%03uL", i ? ", " : "", names[i],
                        d[i] / 1000000, (d[i] / 1000) % 1000);
    }

    h->value.len = p - h->value.data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_json_response(ngx_http_srt_ctx_t *ctx)
{
    yajl_gen                g;
    ngx_uint_t              i;
    ngx_flag_t              chat;
    ngx_http_srt_choice_t  *ch;

    chat = (ctx->p.endpoint == NGX_HTTP_SRT_EP_CHAT);

    for (i = 0; i < ctx->n_choices; i++) {
        ch = &ctx->choices[i];

        if (ch->timed_out) {
            return ngx_http_srt_send_error(ctx->request, ch->timed_out, NULL,
                                           ch->timed_out
                                           == NGX_HTTP_GATEWAY_TIME_OUT
                                           ? "request_timeout"
                                           : "queue_timeout",
                                           "Request timed out: %s",
                                           ch->errmsg);
        }

        if (ch->error) {
            ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                          "srt: request failed: %s", ch->errmsg);
            return ngx_http_srt_send_error(ctx->request,
                                           NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                           "generation_failed",
                                           "Generation failed: %s",
                                           ch->errmsg);
        }
    }

    g = yajl_gen_alloc(NULL);
    if (g == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    yajl_gen_map_open(g);
    ngx_http_srt_gen_head(ctx, g, chat ? "chat.completion" : "text_completion");
    ngx_http_srt_gen_str(g, "choices");
    yajl_gen_array_open(g);

    for (i = 0; i < ctx->n_choices; i++) {
        ch = &ctx->choices[i];

        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "index");
        yajl_gen_integer(g, (long long) i);

        if (chat) {
            if (ngx_http_srt_parsing(ctx)
                && ngx_http_srt_parse_output(ctx, ch, ch->text_len, 1)
                   != NGX_OK)
            {
                yajl_gen_free(g);
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
            ngx_http_srt_gen_str(g, "message");
            yajl_gen_map_open(g);
            ngx_http_srt_gen_str(g, "role");
            ngx_http_srt_gen_str(g, "assistant");
            ngx_http_srt_gen_message(ctx, i, g);
            yajl_gen_map_close(g);

        } else {
            ngx_http_srt_gen_str(g, "text");
            yajl_gen_string(g, ch->text ? ch->text : (u_char *) "",
                            ch->text_len);
        }

        ngx_http_srt_gen_logprobs(ctx, ch, g, 0, ch->lp ? ch->lp->nelts : 0);

        if (ngx_http_srt_gen_activations(ctx, ch, g) != NGX_OK) {
            yajl_gen_free(g);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_http_srt_gen_str(g, "finish_reason");
        ngx_http_srt_gen_str(g, ngx_http_srt_finish_reason(ch));
        yajl_gen_map_close(g);
    }

    yajl_gen_array_close(g);
    ngx_http_srt_gen_usage(ctx, g);
    yajl_gen_map_close(g);

    if (ngx_http_srt_server_timing(ctx) != NGX_OK) {
        yajl_gen_free(g);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_srt_send_json(ctx->request, NGX_HTTP_OK, g);
}


static void
ngx_http_srt_write_handler(ngx_http_request_t *r)
{
    ngx_event_t               *wev;
    ngx_http_srt_ctx_t        *ctx;
    ngx_http_core_loc_conf_t  *clcf;

    wev = r->connection->write;

    if (wev->timedout) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, NGX_ETIMEDOUT,
                      "srt: client timed out");
        r->connection->timedout = 1;

        ctx = ngx_http_get_module_ctx(r, ngx_http_srt_module);
        if (ctx) {
            ctx->aborted = 1;
        }

        ngx_http_finalize_request(r, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    if (ngx_http_output_filter(r, NULL) == NGX_ERROR) {
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        return;
    }

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (r->connection->buffered) {
        ngx_add_timer(wev, clcf->send_timeout);
    } else if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    if (ngx_handle_write_event(wev, clcf->send_lowat) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


ngx_int_t
ngx_http_srt_pump(ngx_http_srt_ctx_t *ctx)
{
    ngx_int_t               rc;
    ngx_uint_t              i, all_done;
    ngx_chain_t            *out, **last;
    ngx_http_request_t     *r;
    ngx_http_srt_choice_t  *ch;

    r = ctx->request;

    if (ctx->finished) {
        return NGX_HTTP_SRT_WAIT;
    }

    if (ctx->id[0] == '\0') {
        ngx_sprintf(ctx->id, "%s-%08xD%08xD%Z",
                    ctx->p.endpoint == NGX_HTTP_SRT_EP_CHAT ? "chatcmpl"
                                                            : "cmpl",
                    (uint32_t) ngx_random(), (uint32_t) ngx_random());
    }

    all_done = 1;

    for (i = 0; i < ctx->n_choices; i++) {
        ch = &ctx->choices[i];

        if (!ch->done) {
            if (ngx_http_srt_take_tokens(ctx, ch) != NGX_OK) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            if (ch->done && ch->live) {
                /* a stop string ends it early: release aborts the rest */
                srt_chan_release(ctx->model->chan, ch->slot, ch->gen);
                ch->live = 0;
            }
        }

        if (!ch->done) {
            all_done = 0;
        }
    }

    if (all_done && !ctx->header_sent && ngx_http_srt_retry(ctx) == NGX_OK) {
        return NGX_HTTP_SRT_WAIT;
    }

    if (!ctx->p.stream) {
        if (!all_done) {
            return NGX_HTTP_SRT_WAIT;
        }

        ctx->finished = 1;
        return ngx_http_srt_json_response(ctx);
    }

    /* streaming */

    if (!ctx->header_sent) {
        for (i = 0; i < ctx->n_choices; i++) {
            if (ctx->choices[i].error && ctx->choices[i].n_tokens == 0
                && all_done)
            {
                /* nothing sent yet: a plain error response is clearer */
                ctx->finished = 1;
                return ngx_http_srt_json_response(ctx);
            }
        }

        rc = ngx_http_srt_send_stream_header(ctx);
        if (rc == NGX_ERROR || rc > NGX_OK) {
            ctx->finished = 1;
            return rc;
        }
    }

    out = NULL;
    last = &out;

    for (i = 0; i < ctx->n_choices; i++) {
        if (ngx_http_srt_stream_choice(ctx, i, &last) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    if (all_done) {
        ctx->finished = 1;

        if (ngx_http_srt_stream_end(ctx, &last) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    if (out == NULL) {
        return NGX_HTTP_SRT_WAIT;
    }

    if (!all_done) {
        for (ngx_chain_t *cl = out; cl; cl = cl->next) {
            if (cl->next == NULL) {
                cl->buf->flush = 1;
            }
        }
    }

    rc = ngx_http_output_filter(r, out);

    ngx_chain_update_chains(r->pool, &ctx->free, &ctx->busy, &out,
                            (ngx_buf_tag_t) &ngx_http_srt_module);

    if (all_done) {
        return rc;
    }

    if (rc == NGX_ERROR) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "srt: writing to the client failed, aborting the "
                      "request");
        ctx->aborted = 1;
        ctx->finished = 1;
        return NGX_HTTP_CLIENT_CLOSED_REQUEST;
    }

    if (r->connection->buffered) {
        ngx_http_srt_write_handler(r);
    }

    return NGX_HTTP_SRT_WAIT;
}
