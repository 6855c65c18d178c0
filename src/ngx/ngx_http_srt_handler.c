/*
 * Endpoints and the life of a request in a worker.
 *
 * A generation request reads its body, is validated and tokenized
 * (ngx_http_srt_request.c), takes channel slots, and then waits without blocking: the
 * scheduler rings this worker's doorbell, registered in the event loop, and
 * ngx_http_srt_pump() (ngx_http_srt_response.c) turns new tokens into JSON or SSE.
 * A one-second non-cancelable timer per request covers a lost wake-up and keeps a
 * gracefully exiting worker alive until the request is answered. A client that goes
 * away releases its slots, which aborts the request in the scheduler.
 */

#include "ngx_http_srt_module.h"
#include "srt/sched.h"     /* srt_sched_metrics, rendered for /metrics */


static void ngx_http_srt_body_handler(ngx_http_request_t *r);
static void ngx_http_srt_doorbell_handler(ngx_event_t *ev);
static void ngx_http_srt_timer_handler(ngx_event_t *ev);
static void ngx_http_srt_reading_handler(ngx_http_request_t *r);
static void ngx_http_srt_submit(ngx_http_request_t *r, ngx_http_srt_ctx_t *ctx);
static void ngx_http_srt_cleanup(void *data);
static ngx_int_t ngx_http_srt_park(ngx_http_request_t *r,
    ngx_http_srt_ctx_t *ctx);
static void ngx_http_srt_unpark(ngx_http_srt_ctx_t *ctx);
static void ngx_http_srt_park_timeout(ngx_event_t *ev);
static ngx_int_t ngx_http_srt_info(ngx_http_request_t *r,
    ngx_http_srt_model_t *m, ngx_http_srt_endpoint_e ep);
static ngx_int_t ngx_http_srt_unavailable(ngx_http_request_t *r,
    ngx_http_srt_model_t *m);


static ngx_http_srt_endpoint_e
ngx_http_srt_endpoint(ngx_http_request_t *r)
{
    size_t      len;
    u_char     *end;
    ngx_uint_t  i;

    static struct {
        ngx_str_t                suffix;
        ngx_http_srt_endpoint_e  ep;
    } eps[] = {
        { ngx_string("/chat/completions"), NGX_HTTP_SRT_EP_CHAT },
        { ngx_string("/completions"), NGX_HTTP_SRT_EP_COMPLETIONS },
        { ngx_string("/models"), NGX_HTTP_SRT_EP_MODELS },
        { ngx_string("/health"), NGX_HTTP_SRT_EP_HEALTH },
        { ngx_string("/health_generate"), NGX_HTTP_SRT_EP_HEALTH },
        { ngx_string("/get_model_info"), NGX_HTTP_SRT_EP_MODEL_INFO },
    };

    len = r->uri.len;
    end = r->uri.data + len;

    while (len > 1 && end[-1] == '/') {
        end--;
        len--;
    }

    for (i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
        if (len >= eps[i].suffix.len
            && ngx_strncmp(end - eps[i].suffix.len, eps[i].suffix.data,
                           eps[i].suffix.len) == 0)
        {
            return eps[i].ep;
        }
    }

    return NGX_HTTP_SRT_EP_UNKNOWN;
}


ngx_int_t
ngx_http_srt_handler(ngx_http_request_t *r)
{
    ngx_int_t                 rc;
    ngx_http_srt_ctx_t       *ctx;
    ngx_http_cleanup_t       *cln;
    ngx_http_srt_loc_conf_t  *slcf;
    ngx_http_srt_endpoint_e   ep;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_srt_module);

    if (slcf->model == NULL) {
        return NGX_DECLINED;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "srt handler: %V %V", &r->method_name, &r->uri);

    ep = ngx_http_srt_endpoint(r);

    if (ep == NGX_HTTP_SRT_EP_UNKNOWN) {
        (void) ngx_http_discard_request_body(r);
        return ngx_http_srt_send_error(r, NGX_HTTP_NOT_FOUND, NULL,
                                       "not_found", "Unknown endpoint \"%V\"",
                                       &r->uri);
    }

    if (ep == NGX_HTTP_SRT_EP_CHAT || ep == NGX_HTTP_SRT_EP_COMPLETIONS) {
        if (r->method != NGX_HTTP_POST) {
            if (ngx_http_srt_add_header(r, "Allow", "POST") == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            (void) ngx_http_discard_request_body(r);
            return ngx_http_srt_send_error(r, NGX_HTTP_NOT_ALLOWED, NULL,
                                           "method_not_allowed",
                                           "Method %V is not allowed here; "
                                           "use POST", &r->method_name);
        }

        ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_srt_ctx_t));
        if (ctx == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ctx->request = r;
        ctx->model = slcf->model;
        ctx->p.endpoint = ep;
        ngx_http_set_ctx(r, ctx, ngx_http_srt_module);

        cln = ngx_http_cleanup_add(r, 0);
        if (cln == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        cln->handler = ngx_http_srt_cleanup;
        cln->data = ctx;

        if (slcf->max_body
            && r->headers_in.content_length_n > slcf->max_body)
        {
            off_t  len = r->headers_in.content_length_n;

            /* discarding zeroes content_length_n: the size was kept first */
            (void) ngx_http_discard_request_body(r);
            return ngx_http_srt_send_error(r,
                                           NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                           NULL, "request_too_large",
                                           "Request body is too large: %O "
                                           "bytes, the limit is %O",
                                           len, slcf->max_body);
        }

        r->request_body_in_single_buf = 1;

        rc = ngx_http_read_client_request_body(r, ngx_http_srt_body_handler);

        if (rc == NGX_HTTP_REQUEST_ENTITY_TOO_LARGE) {
            return ngx_http_srt_send_error(r, rc, NULL, "request_too_large",
                                           "Request body is too large");
        }

        if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
            return rc;
        }

        return NGX_DONE;
    }

    if (r->method != NGX_HTTP_GET && r->method != NGX_HTTP_HEAD) {
        if (ngx_http_srt_add_header(r, "Allow", "GET, HEAD") == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        (void) ngx_http_discard_request_body(r);
        return ngx_http_srt_send_error(r, NGX_HTTP_NOT_ALLOWED, NULL,
                                       "method_not_allowed",
                                       "Method %V is not allowed here; "
                                       "use GET", &r->method_name);
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_srt_info(r, slcf->model, ep);
}


/*
 * The request body, wherever nginx put it (memory or a temp file),
 * NUL-terminated (*len without the NUL): "" without one, NULL on a read error
 * or when it is over max bytes (it is then not read).
 */

u_char *
ngx_http_srt_body(ngx_http_request_t *r, size_t max, size_t *len)
{
    u_char       *buf, *p;
    size_t        size;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        *len = 0;
        return (u_char *) "";
    }

    size = 0;
    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;
        size += b->in_file ? (size_t) (b->file_last - b->file_pos)
                           : (size_t) (b->last - b->pos);
    }

    if (size > max) {
        return NULL;
    }

    buf = ngx_pnalloc(r->pool, size + 1);
    if (buf == NULL) {
        return NULL;
    }

    p = buf;
    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            n = ngx_read_file(b->file, p, b->file_last - b->file_pos,
                              b->file_pos);
            if (n != b->file_last - b->file_pos) {
                return NULL;
            }
            p += n;

        } else {
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
        }
    }

    *p = '\0';
    *len = p - buf;

    return buf;
}


/*
 * srt_wait_ready: while the model loads (or its scheduler restarts), a request may wait
 * for it instead of getting 503. The scheduler's state changes ring every worker's
 * doorbell, which retries parked requests; a timer enforces the limit.
 */

static ngx_int_t
ngx_http_srt_park(ngx_http_request_t *r, ngx_http_srt_ctx_t *ctx)
{
    int                       st;
    ngx_http_srt_model_t     *m;
    ngx_http_srt_loc_conf_t  *slcf;

    m = ctx->model;
    slcf = ngx_http_get_module_loc_conf(r, ngx_http_srt_module);

    /* a worker shutting down (quit, reload) answers now: its channel may
     * never see another scheduler, and nginx waits for this request */
    if (slcf->wait_ready == 0 || m->chan == NULL || m->load_error.len
        || ngx_process != NGX_PROCESS_WORKER || ngx_exiting)
    {
        return NGX_DECLINED;
    }

    st = srt_chan_sched_state_get(m->chan, NULL, 0);
    if (st == SRT_CHAN_SCHED_FAILED) {
        return NGX_DECLINED;
    }

    if (!ctx->parked) {
        ctx->parked = 1;
        ctx->park_deadline = ngx_current_msec + slcf->wait_ready;
        ngx_queue_insert_tail(&m->parked, &ctx->queue);

        ctx->timer.handler = ngx_http_srt_park_timeout;
        ctx->timer.data = ctx;
        ctx->timer.log = r->connection->log;
        ctx->timer.cancelable = 0;
        r->read_event_handler = ngx_http_srt_reading_handler;
    }

    if ((ngx_msec_int_t) (ctx->park_deadline - ngx_current_msec) <= 0) {
        ngx_http_srt_unpark(ctx);
        return NGX_DECLINED;
    }

    ngx_add_timer(&ctx->timer, ctx->park_deadline - ngx_current_msec);

    return NGX_OK;
}


static void
ngx_http_srt_unpark(ngx_http_srt_ctx_t *ctx)
{
    if (!ctx->parked) {
        return;
    }

    ctx->parked = 0;
    ngx_queue_remove(&ctx->queue);

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
}


static void
ngx_http_srt_park_timeout(ngx_event_t *ev)
{
    ngx_http_srt_ctx_t  *ctx = ev->data;
    ngx_http_request_t  *r = ctx->request;
    ngx_connection_t    *c = r->connection;

    ngx_http_srt_unpark(ctx);
    ngx_http_finalize_request(r, ngx_http_srt_unavailable(r, ctx->model));
    ngx_http_run_posted_requests(c);
}


static void
ngx_http_srt_body_handler(ngx_http_request_t *r)
{
    char                      errbuf[512];
    u_char                   *body;
    size_t                    len;
    ngx_int_t                 rc;
    ngx_uint_t                status;
    const char               *param;
    ngx_http_srt_ctx_t       *ctx;
    ngx_http_srt_model_t     *m;
    ngx_http_srt_loc_conf_t  *slcf;

    ctx = ngx_http_get_module_ctx(r, ngx_http_srt_module);
    m = ctx->model;

    if (ctx->t_body_ns == 0) {
        ctx->t_body_ns = srt_chan_now_ns();
    }

    if (ctx->parsed) {
        /* a retry that waited for the next scheduler: parsed, rendered and tokenized once */
        ngx_http_srt_unpark(ctx);
        ngx_http_srt_submit(r, ctx);
        return;
    }

    body = NULL;
    len = 0;

    if (ctx->parse == NULL) {
        body = ngx_http_srt_body(r, NGX_MAX_SIZE_T_VALUE, &len);
        if (body == NULL) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        slcf = ngx_http_get_module_loc_conf(r, ngx_http_srt_module);

        if (slcf->max_body && (off_t) len > slcf->max_body) {
            /* a chunked body: its size is known only now */
            ngx_http_finalize_request(r,
                ngx_http_srt_send_error(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                        NULL, "request_too_large",
                                        "Request body is too large: %uz "
                                        "bytes, the limit is %O", len,
                                        slcf->max_body));
            return;
        }
    }

    status = NGX_HTTP_BAD_REQUEST;
    param = NULL;
    errbuf[0] = '\0';

    /* a parked request (ctx->parse) continues where its parse stopped */
    rc = ngx_http_srt_parse_request(r, m, body, len, &ctx->p, &ctx->parse,
                                    &status, &param, errbuf, sizeof(errbuf));

    if (rc == NGX_DECLINED) {
        if (ngx_http_srt_park(r, ctx) == NGX_OK) {
            return;
        }

        /* unavailable: 503 with the scheduler's state */
        ngx_http_finalize_request(r, ngx_http_srt_unavailable(r, m));
        return;
    }

    if (ctx->parked) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "srt: a parked request resumes for model \"%V\" with "
                      "its body as parsed when it arrived", &m->name);
        ngx_http_srt_unpark(ctx);
    }

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r,
            ngx_http_srt_send_error(r, status, param,
                                    status == NGX_HTTP_NOT_FOUND
                                    ? "model_not_found" : NULL,
                                    "%s", errbuf));
        return;
    }

    ctx->parsed = 1;

    ngx_http_srt_submit(r, ctx);
}


/*
 * The parsed request into the channel, one slot per choice, then wait. A retry
 * (ngx_http_srt_retry) comes back here with the request as parsed, rendered and
 * tokenized the first time.
 */

static void
ngx_http_srt_submit(ngx_http_request_t *r, ngx_http_srt_ctx_t *ctx)
{
    int                       state;
    uint64_t                  group;
    ngx_int_t                 rc;
    ngx_uint_t                i;
    srt_request               rq;
    ngx_http_srt_model_t     *m;
    srt_chan_submit_status    st;

    m = ctx->model;
    rq = ctx->p.rq;

    state = srt_chan_sched_state_get(m->chan, NULL, 0);
    if (ctx->retried
        && state != SRT_CHAN_SCHED_READY && state != SRT_CHAN_SCHED_HANDOVER)
    {
        /* a retry waits for the next scheduler, as a new request would */
        if (ngx_http_srt_park(r, ctx) == NGX_OK) {
            return;
        }

        ngx_http_finalize_request(r, ngx_http_srt_unavailable(r, m));
        return;
    }

    /* sized by n: the context stays within the request pool's first block */
    if (ctx->choices == NULL) {
        ctx->choices = ngx_pcalloc(r->pool,
                                   ctx->p.n * sizeof(ngx_http_srt_choice_t));
        if (ctx->choices == NULL) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    /* n > 1: one slot per choice; the scheduler shares the prompt's KV via the group */
    group = ctx->p.n > 1 ? srt_chan_new_group(m->chan) : 0;

    for (i = 0; i < ctx->p.n; i++) {
        ngx_http_srt_choice_t  *ch = &ctx->choices[i];

        if (rq.sampling.has_seed) {
            rq.sampling.seed += i;   /* siblings must not repeat each other */
        }

        st = srt_chan_submit(m->chan, ctx->p.prompt, (uint32_t) ctx->p.n_prompt,
                             &rq, group, &ch->slot, &ch->gen);

        if (st != SRT_CHAN_SUBMIT_OK) {
            /* give back what this request already took */
            ngx_http_srt_cleanup(ctx);

            if (st == SRT_CHAN_SUBMIT_TOO_LONG) {
                ngx_http_finalize_request(r,
                    ngx_http_srt_send_error(r, NGX_HTTP_BAD_REQUEST,
                                            "messages", NULL,
                                            "The prompt has %uz tokens, more "
                                            "than this server's context",
                                            ctx->p.n_prompt));
                return;
            }

            if (st == SRT_CHAN_SUBMIT_FULL) {
                ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                              "srt: model \"%V\" is overloaded: no free "
                              "request slot", &m->name);
                ngx_http_finalize_request(r, ngx_http_srt_send_error(r,
                    NGX_HTTP_SERVICE_UNAVAILABLE, NULL, "overloaded",
                    "The server is overloaded: too many requests in "
                    "flight; retry later"));
                return;
            }

            ngx_http_finalize_request(r, ngx_http_srt_unavailable(r, m));
            return;
        }

        ch->live = 1;
        srt_detok_init(&ch->detok, m->tok, SRT_DETOK_SKIP_SPECIAL);
        ctx->n_choices = i + 1;
    }

    ctx->created = ngx_time();

    ngx_queue_insert_tail(&m->waiting, &ctx->queue);
    ctx->queued = 1;

    ctx->timer.handler = ngx_http_srt_timer_handler;
    ctx->timer.data = ctx;
    ctx->timer.log = r->connection->log;
    ctx->timer.cancelable = 0;
    ngx_add_timer(&ctx->timer, 1000);

    r->read_event_handler = ngx_http_srt_reading_handler;

    rc = ngx_http_srt_pump(ctx);

    if (rc == NGX_HTTP_SRT_WAIT) {
        return;
    }

    ngx_http_finalize_request(r, rc);
}


/*
 * A scheduler that dies fails what was queued for it, including requests no scheduler had
 * taken yet (a request can be queued in the moment between the crash and its supervisor
 * noticing). Nothing of those was computed: with srt_wait_ready they are submitted again,
 * once, and wait for the successor like any request arriving while it starts.
 */

ngx_int_t
ngx_http_srt_retry(ngx_http_srt_ctx_t *ctx)
{
    ngx_uint_t                i;
    ngx_http_request_t       *r;
    ngx_http_srt_choice_t    *ch;
    ngx_http_srt_loc_conf_t  *slcf;

    r = ctx->request;
    slcf = ngx_http_get_module_loc_conf(r, ngx_http_srt_module);

    if (ctx->retried || slcf->wait_ready == 0 || ctx->n_choices == 0) {
        return NGX_DECLINED;
    }

    for (i = 0; i < ctx->n_choices; i++) {
        ch = &ctx->choices[i];

        if (!ch->done || !ch->error || ch->t_pop_ns != 0 || ch->t_submit_ns == 0) {
            return NGX_DECLINED;
        }
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "srt: request failed before a scheduler took it (%s): "
                  "submitting it again", ctx->choices[0].errmsg);

    ctx->retried = 1;

    ngx_http_srt_cleanup(ctx);   /* slots, the waiting queue, the timer */

    ngx_memzero(ctx->choices, ctx->n_choices * sizeof(ngx_http_srt_choice_t));
    ctx->n_choices = 0;

    ngx_http_srt_submit(r, ctx);

    return NGX_OK;
}


/* Give back every slot: releasing one the scheduler still runs aborts it there. */

static void
ngx_http_srt_cleanup(void *data)
{
    ngx_http_srt_ctx_t *ctx = data;

    ngx_uint_t  i;

    if (ctx->request->connection->error && !ctx->aborted && !ctx->finished) {
        ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                      "srt: client closed the connection, aborting the request");
        ctx->aborted = 1;
    }

    ngx_http_srt_unpark(ctx);

    for (i = 0; i < ctx->n_choices; i++) {
        if (ctx->choices[i].live) {
            srt_chan_release(ctx->model->chan, ctx->choices[i].slot,
                             ctx->choices[i].gen);
            ctx->choices[i].live = 0;
        }

    }

    if (ctx->queued) {
        ngx_queue_remove(&ctx->queue);
        ctx->queued = 0;
    }

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
}


/*
 * How long a serving scheduler has not stepped, when that is longer than
 * srt_watchdog_timeout (else 0): it is stopped or wedged. Its supervisor
 * kills it then; until that works, /health and metrics say so.
 */

ngx_msec_t
ngx_http_srt_sched_stale(ngx_http_srt_model_t *m)
{
    uint64_t  hb, now;

    if (m->chan == NULL || m->watchdog == 0
        || srt_chan_sched_state_get(m->chan, NULL, 0) != SRT_CHAN_SCHED_READY)
    {
        return 0;
    }

    hb = srt_chan_heartbeat_ns(m->chan);
    now = srt_chan_now_ns();

    if (hb == 0 || now <= hb || (now - hb) / 1000000 <= m->watchdog) {
        return 0;
    }

    return (ngx_msec_t) ((now - hb) / 1000000);
}


/*
 * srt_queue_timeout (from submission to the first token: waiting in the
 * channel, in the scheduler's queue, and the prefill) and srt_request_timeout
 * (from the body to the last token): past either, the
 * slots are released (the scheduler drops the request) and the client gets
 * the error, in JSON or as an SSE error event after what was streamed.
 */

static void
ngx_http_srt_deadlines(ngx_http_srt_ctx_t *ctx)
{
    uint64_t                  now;
    ngx_uint_t                i, status;
    ngx_msec_t                limit;
    srt_chan_output           o;
    ngx_http_srt_choice_t    *ch;
    ngx_http_srt_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(ctx->request, ngx_http_srt_module);

    if ((slcf->queue_timeout == 0 && slcf->request_timeout == 0)
        || ctx->finished)
    {
        return;
    }

    now = srt_chan_now_ns();

    for (i = 0; i < ctx->n_choices; i++) {
        ch = &ctx->choices[i];

        if (!ch->live || ch->done
            || srt_chan_read(ctx->model->chan, ch->slot, ch->gen, &o) != SRT_OK
            || o.finish != SRT_FINISH_NONE)
        {
            continue;
        }

        status = 0;
        limit = 0;

        if (slcf->request_timeout && ctx->t_body_ns
            && now - ctx->t_body_ns > slcf->request_timeout * 1000000ULL)
        {
            status = NGX_HTTP_GATEWAY_TIME_OUT;
            limit = slcf->request_timeout;

        } else if (slcf->queue_timeout && o.n_out == 0 && o.t_submit_ns
                   && now - o.t_submit_ns > slcf->queue_timeout * 1000000ULL)
        {
            status = NGX_HTTP_SERVICE_UNAVAILABLE;
            limit = slcf->queue_timeout;
        }

        if (status == 0) {
            continue;
        }

        srt_chan_release(ctx->model->chan, ch->slot, ch->gen);

        ch->live = 0;
        ch->done = 1;
        ch->error = 1;
        ch->timed_out = status;
        ch->finish = "error";
        ch->errmsg = (char *) ngx_pnalloc(ctx->request->pool, 128);

        if (ch->errmsg) {
            ngx_snprintf((u_char *) ch->errmsg, 127, "%s %M ms (%s)%Z",
                         status == NGX_HTTP_GATEWAY_TIME_OUT
                         ? "the request took longer than"
                         : "no token for the request after",
                         limit,
                         status == NGX_HTTP_GATEWAY_TIME_OUT
                         ? "srt_request_timeout" : "srt_queue_timeout");
        } else {
            ch->errmsg = "the request timed out";
        }

        ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                      "srt: %s", ch->errmsg);
    }
}


static void
ngx_http_srt_run(ngx_http_srt_ctx_t *ctx)
{
    ngx_int_t            rc;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;

    ngx_http_srt_deadlines(ctx);

    rc = ngx_http_srt_pump(ctx);

    if (rc != NGX_HTTP_SRT_WAIT) {
        ngx_http_finalize_request(r, rc);
    }

    ngx_http_run_posted_requests(c);
}


static void
ngx_http_srt_doorbell_handler(ngx_event_t *ev)
{
    ngx_queue_t           *q, *next;
    ngx_connection_t      *c;
    ngx_http_srt_ctx_t    *ctx;
    ngx_http_srt_model_t  *m;

    c = ev->data;
    m = c->data;

    srt_chan_worker_drain(m->chan);

    ngx_http_srt_admin_wake(m);

    if (!ngx_queue_empty(&m->parked)
        && srt_chan_sched_state_get(m->chan, NULL, 0) == SRT_CHAN_SCHED_READY)
    {
        for (q = ngx_queue_head(&m->parked);
             q != ngx_queue_sentinel(&m->parked);
             q = next)
        {
            next = ngx_queue_next(q);
            ctx = ngx_queue_data(q, ngx_http_srt_ctx_t, queue);

            c = ctx->request->connection;
            ngx_http_srt_body_handler(ctx->request);
            ngx_http_run_posted_requests(c);
        }
    }

    c = ev->data;

    for (q = ngx_queue_head(&m->waiting);
         q != ngx_queue_sentinel(&m->waiting);
         q = next)
    {
        next = ngx_queue_next(q);
        ctx = ngx_queue_data(q, ngx_http_srt_ctx_t, queue);

        /* finishing may remove ctx from the queue: next was taken first */
        ngx_http_srt_run(ctx);
    }
}


static void
ngx_http_srt_timer_handler(ngx_event_t *ev)
{
    ngx_http_srt_ctx_t  *ctx = ev->data;

    ngx_add_timer(&ctx->timer, 1000);

    ngx_http_srt_run(ctx);
}


/*
 * While the request waits on the scheduler: nginx's own test, which knows
 * HTTP/2, HTTP/3 and TLS, finalizes the request when the client has gone; the
 * cleanup (ngx_http_srt_cleanup) then releases the slots, which aborts the
 * request in the scheduler.
 */

static void
ngx_http_srt_reading_handler(ngx_http_request_t *r)
{
    ngx_http_test_reading(r);
}


static ngx_int_t
ngx_http_srt_add_retry_after(ngx_http_request_t *r)
{
    ngx_table_elt_t          *h;
    ngx_http_srt_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_srt_module);

    h = ngx_http_srt_add_header(r, "Retry-After", NULL);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->value.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
    if (h->value.data == NULL) {
        return NGX_ERROR;
    }

    h->value.len = ngx_sprintf(h->value.data, "%M",
                               (slcf->retry_after + 999) / 1000)
                   - h->value.data;

    return NGX_OK;
}


/*
 * Load errors name files ("/srv/models/x/tokenizer.json: invalid JSON"): the
 * log keeps them whole, a client sees only the last component of each path.
 */

static void
ngx_http_srt_strip_paths(char *s)
{
    char  *w, *p, *base;

    for (w = p = s; *p; ) {
        if (*p == '/' && (p == s || p[-1] == ' ' || p[-1] == '"'
                          || p[-1] == '(' || p[-1] == '\''))
        {
            base = p;
            while (*p && *p != ' ' && *p != '"' && *p != '\'' && *p != ':'
                   && *p != ')' && *p != ',')
            {
                if (*p == '/') {
                    base = p + 1;
                }
                p++;
            }
            while (base < p) {
                *w++ = *base++;
            }
            continue;
        }
        *w++ = *p++;
    }

    *w = '\0';
}


static ngx_int_t
ngx_http_srt_unavailable(ngx_http_request_t *r, ngx_http_srt_model_t *m)
{
    int   st;
    char  msg[256];

    if (m->chan == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "srt: model \"%V\" has no channel in this process",
                      &m->name);
        return ngx_http_srt_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                       "model_unavailable",
                                       "Model \"%V\" is not available",
                                       &m->name);
    }

    if (ngx_process == NGX_PROCESS_SINGLE) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "srt: model \"%V\" cannot be served with "
                      "\"master_process off\": no scheduler process",
                      &m->name);
        return ngx_http_srt_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                       "model_unavailable",
                                       "Model \"%V\" is not available: nginx "
                                       "runs with \"master_process off\", so "
                                       "there is no scheduler process",
                                       &m->name);
    }

    if (m->load_error.len) {
        ngx_cpystrn((u_char *) msg, m->load_error.data,
                    ngx_min(m->load_error.len + 1, sizeof(msg)));
        ngx_http_srt_strip_paths(msg);

        return ngx_http_srt_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                       "model_unavailable",
                                       "Model \"%V\" is not available: %s",
                                       &m->name, msg);
    }

    st = srt_chan_sched_state_get(m->chan, msg, sizeof(msg));
    ngx_http_srt_strip_paths(msg);

    return ngx_http_srt_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                   "model_unavailable",
                                   "Model \"%V\" is %s%s%s",
                                   &m->name,
                                   st == SRT_CHAN_SCHED_LOADING
                                   ? "loading" : "not available",
                                   msg[0] ? ": " : "", msg);
}


ngx_int_t
ngx_http_srt_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *param, const char *code, const char *fmt, ...)
{
    u_char    msg[1024], *last;
    va_list   args;
    yajl_gen  g;
    ngx_str_t s;

    va_start(args, fmt);
    last = ngx_vslprintf(msg, msg + sizeof(msg), fmt, args);
    va_end(args);

    s.data = msg;
    s.len = last - msg;

    if (status == NGX_HTTP_SERVICE_UNAVAILABLE) {
        if (ngx_http_srt_add_retry_after(r) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    g = yajl_gen_alloc(NULL);
    if (g == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    yajl_gen_map_open(g);
    ngx_http_srt_gen_str(g, "error");
    yajl_gen_map_open(g);

    ngx_http_srt_gen_str(g, "message");
    ngx_http_srt_gen_ngx_str(g, &s);

    ngx_http_srt_gen_str(g, "type");
    ngx_http_srt_gen_str(g, status >= 500 ? "server_error"
                            : "invalid_request_error");

    ngx_http_srt_gen_str(g, "param");
    if (param) {
        ngx_http_srt_gen_str(g, param);
    } else {
        yajl_gen_null(g);
    }

    ngx_http_srt_gen_str(g, "code");
    if (code) {
        ngx_http_srt_gen_str(g, code);
    } else {
        yajl_gen_integer(g, status);
    }

    yajl_gen_map_close(g);
    yajl_gen_map_close(g);

    return ngx_http_srt_send_json(r, status, g);
}


static ngx_int_t
ngx_http_srt_info(ngx_http_request_t *r, ngx_http_srt_model_t *m,
    ngx_http_srt_endpoint_e ep)
{
    int                  st;
    char                 msg[256];
    yajl_gen             g;
    srt_chan_stats       stats;
    srt_chan_model_info  info;
    ngx_int_t            have_info;
    ngx_msec_t           stale;

    if (m->chan == NULL) {
        return ngx_http_srt_unavailable(r, m);
    }

    st = srt_chan_sched_state_get(m->chan, msg, sizeof(msg));
    have_info = (srt_chan_model_info_get(m->chan, &info) == SRT_OK);

    if (ep == NGX_HTTP_SRT_EP_HEALTH) {
        /* nginx -s quit: in-flight requests finish; fronts and probes move on */
        if (ngx_exiting) {
            return ngx_http_srt_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                           NULL, "draining",
                                           "Model \"%V\" is draining: this "
                                           "server is shutting down", &m->name);
        }

        if (st != SRT_CHAN_SCHED_READY || ngx_process == NGX_PROCESS_SINGLE
            || m->load_error.len)
        {
            return ngx_http_srt_unavailable(r, m);
        }

        stale = ngx_http_srt_sched_stale(m);
        if (stale) {
            return ngx_http_srt_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                           NULL, "model_unavailable",
                                           "The scheduler of model \"%V\" has "
                                           "not responded for %M ms "
                                           "(srt_watchdog_timeout %M ms)",
                                           &m->name, stale, m->watchdog);
        }

        srt_chan_stats_get(m->chan, &stats);

        g = yajl_gen_alloc(NULL);
        if (g == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "status");
        ngx_http_srt_gen_str(g, "ok");
        ngx_http_srt_gen_str(g, "model");
        ngx_http_srt_gen_ngx_str(g, &m->name);
        ngx_http_srt_gen_str(g, "running");
        ngx_http_srt_gen_int(g, stats.running);
        ngx_http_srt_gen_str(g, "queued");
        ngx_http_srt_gen_int(g, stats.queued);
        ngx_http_srt_gen_str(g, "slots_free");
        ngx_http_srt_gen_int(g, stats.slots_total - stats.slots_used);
        ngx_http_srt_gen_str(g, "requests_total");
        ngx_http_srt_gen_int(g, (long long) stats.submitted);
        yajl_gen_map_close(g);

        return ngx_http_srt_send_json(r, NGX_HTTP_OK, g);
    }

    g = yajl_gen_alloc(NULL);
    if (g == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ep == NGX_HTTP_SRT_EP_MODELS) {
        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "object");
        ngx_http_srt_gen_str(g, "list");
        ngx_http_srt_gen_str(g, "data");
        yajl_gen_array_open(g);
        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "id");
        ngx_http_srt_gen_ngx_str(g, &m->name);
        ngx_http_srt_gen_str(g, "object");
        ngx_http_srt_gen_str(g, "model");
        ngx_http_srt_gen_str(g, "created");
        ngx_http_srt_gen_int(g, (long long) ngx_time());
        ngx_http_srt_gen_str(g, "owned_by");
        ngx_http_srt_gen_str(g, "ngx_srt");
        /* the served name: filesystem paths are the operator's business */
        ngx_http_srt_gen_str(g, "root");
        ngx_http_srt_gen_ngx_str(g, &m->name);
        if (have_info) {
            ngx_http_srt_gen_str(g, "max_model_len");
            ngx_http_srt_gen_int(g, info.context_length);
        }
        yajl_gen_map_close(g);
        yajl_gen_array_close(g);
        yajl_gen_map_close(g);

        return ngx_http_srt_send_json(r, NGX_HTTP_OK, g);
    }

    /* /get_model_info */
    yajl_gen_map_open(g);
    ngx_http_srt_gen_str(g, "model_path");
    ngx_http_srt_gen_ngx_str(g, &m->name);
    ngx_http_srt_gen_str(g, "tokenizer_path");
    ngx_http_srt_gen_ngx_str(g, &m->name);
    ngx_http_srt_gen_str(g, "served_model_name");
    ngx_http_srt_gen_ngx_str(g, &m->name);
    ngx_http_srt_gen_str(g, "is_generation");
    yajl_gen_bool(g, 1);
    ngx_http_srt_gen_str(g, "status");
    ngx_http_srt_gen_str(g, st == SRT_CHAN_SCHED_READY ? "ready"
                            : st == SRT_CHAN_SCHED_LOADING ? "loading"
                            : st == SRT_CHAN_SCHED_HANDOVER ? "restarting"
                            : st == SRT_CHAN_SCHED_FAILED ? "failed"
                            : "down");
    if (have_info) {
        ngx_http_srt_gen_str(g, "architecture");
        ngx_http_srt_gen_str(g, info.arch);
        ngx_http_srt_gen_str(g, "device");
        ngx_http_srt_gen_str(g, info.device);
        ngx_http_srt_gen_str(g, "context_length");
        ngx_http_srt_gen_int(g, info.context_length);
        ngx_http_srt_gen_str(g, "vocab_size");
        ngx_http_srt_gen_int(g, info.vocab_size);
        ngx_http_srt_gen_str(g, "max_total_tokens");
        ngx_http_srt_gen_int(g, info.max_total_tokens);
        ngx_http_srt_gen_str(g, "max_running_requests");
        ngx_http_srt_gen_int(g, info.max_running_requests);
    }
    yajl_gen_map_close(g);

    return ngx_http_srt_send_json(r, NGX_HTTP_OK, g);
}


ngx_int_t
ngx_http_srt_worker_init(ngx_cycle_t *cycle, ngx_http_srt_model_t *m)
{
    int                fd;
    srt_err            err;
    srt_frontend       fe;
    ngx_connection_t  *c;
    ngx_str_t          e;

    ngx_queue_init(&m->waiting);
    ngx_queue_init(&m->parked);

    err.msg[0] = '\0';

    /* tokenizer and chat template: the front half runs in the worker */

    if (srt_frontend_load(m->cfg.model_path, m->cfg.chat_template, &fe, &err)
        != SRT_OK)
    {
        goto failed;
    }

    m->tok = fe.tok;
    m->tmpl = fe.tmpl;
    m->bos_token = fe.bos_token;
    m->eos_token = fe.eos_token;
    m->tool_format = fe.tool_format;

    if (fe.tmpl && !fe.tool_format_sure && ngx_process == NGX_PROCESS_WORKER
        && ngx_worker == 0)
    {
        ngx_log_error(NGX_LOG_INFO, cycle->log, 0,
                      "srt_model \"%V\": the chat template names no single "
                      "tool-call format; srt_tool_call_parser auto uses "
                      "hermes", &m->name);
    }

    goto doorbell;

failed:

    ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                  "srt_model \"%V\": %s", &m->name, err.msg);

    e.len = ngx_strlen(err.msg);
    e.data = ngx_pnalloc(cycle->pool, e.len);
    if (e.data == NULL) {
        return NGX_ERROR;
    }
    ngx_memcpy(e.data, err.msg, e.len);
    m->load_error = e;

doorbell:

    if (ngx_process != NGX_PROCESS_WORKER) {
        return NGX_OK;
    }

    fd = srt_chan_worker_open(m->chan, &err);
    if (fd < 0) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "srt_model \"%V\": %s", &m->name, err.msg);
        return NGX_ERROR;
    }

    c = ngx_get_connection(fd, cycle->log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    c->data = m;
    c->pool = cycle->pool;
    c->read->handler = ngx_http_srt_doorbell_handler;
    c->read->log = cycle->log;
    c->write->log = cycle->log;
    c->read->channel = 1;
    c->write->channel = 1;

    if (ngx_add_event(c->read, NGX_READ_EVENT, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    m->bell = c;

    return NGX_OK;
}


/*
 * srt_metrics on: Prometheus text for every model of this http{} block: the metrics its
 * scheduler published through the channel, rendered here, and the channel's own counters.
 */

ngx_int_t
ngx_http_srt_metrics_handler(ngx_http_request_t *r)
{
    uint64_t                   hb, now;
    int                        st;
    size_t                     size, n;
    u_char                    *p;
    ngx_int_t                  rc;
    ngx_buf_t                 *b;
    ngx_uint_t                 i;
    ngx_chain_t                out;
    srt_chan_stats             stats;
    srt_sched_metrics          mt;
    ngx_http_srt_model_t     **mp, *m;
    ngx_http_srt_main_conf_t  *smcf;

    if (r->method != NGX_HTTP_GET && r->method != NGX_HTTP_HEAD) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    smcf = ngx_http_get_module_main_conf(r, ngx_http_srt_module);
    mp = smcf->models.elts;

    size = smcf->models.nelts * (SRT_CHAN_METRICS_MAX + 2048) + 2048;

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = b->last;

    p = ngx_sprintf(p,
        "# HELP srt:scheduler_up 1 when the model's scheduler serves requests.\n"
        "# TYPE srt:scheduler_up gauge\n");

    for (i = 0; i < smcf->models.nelts; i++) {
        m = mp[i];
        st = m->chan ? srt_chan_sched_state_get(m->chan, NULL, 0)
                     : SRT_CHAN_SCHED_NONE;
        p = ngx_sprintf(p, "srt:scheduler_up{model_name=\"%V\"} %d\n",
                        &m->name, st == SRT_CHAN_SCHED_READY
                                  && ngx_http_srt_sched_stale(m) == 0);
    }

    p = ngx_sprintf(p,
        "# HELP srt:scheduler_heartbeat_age_seconds Time since the model's "
        "scheduler last stepped or woke up (at least once a second while it "
        "lives).\n"
        "# TYPE srt:scheduler_heartbeat_age_seconds gauge\n");

    for (i = 0; i < smcf->models.nelts; i++) {
        m = mp[i];
        hb = m->chan ? srt_chan_heartbeat_ns(m->chan) : 0;
        now = srt_chan_now_ns();
        hb = (hb && now > hb) ? (now - hb) / 1000000 : 0;
        p = ngx_sprintf(p, "srt:scheduler_heartbeat_age_seconds"
                        "{model_name=\"%V\"} %uL.%03uL\n",
                        &m->name, hb / 1000, hb % 1000);
    }

    p = ngx_sprintf(p,
        "# HELP srt:http_requests_withdrawn_total Requests withdrawn before "
        "a scheduler took them (client gone, queue timeout): submitted = "
        "finished + aborted + withdrawn + in flight.\n"
        "# TYPE srt:http_requests_withdrawn_total counter\n");

    for (i = 0; i < smcf->models.nelts; i++) {
        m = mp[i];
        if (m->chan == NULL) {
            continue;
        }
        srt_chan_stats_get(m->chan, &stats);
        p = ngx_sprintf(p, "srt:http_requests_withdrawn_total"
                        "{model_name=\"%V\"} %uL\n", &m->name, stats.withdrawn);
    }

    p = ngx_sprintf(p,
        "# HELP srt:http_requests_submitted_total Requests handed to the "
        "scheduler.\n"
        "# TYPE srt:http_requests_submitted_total counter\n");

    for (i = 0; i < smcf->models.nelts; i++) {
        m = mp[i];
        if (m->chan == NULL) {
            continue;
        }
        srt_chan_stats_get(m->chan, &stats);
        p = ngx_sprintf(p, "srt:http_requests_submitted_total"
                        "{model_name=\"%V\"} %uL\n", &m->name, stats.submitted);
    }

    p = ngx_sprintf(p,
        "# HELP srt:http_requests_overloaded_total Requests refused with 503 "
        "because every slot was taken.\n"
        "# TYPE srt:http_requests_overloaded_total counter\n");

    for (i = 0; i < smcf->models.nelts; i++) {
        m = mp[i];
        if (m->chan == NULL) {
            continue;
        }
        srt_chan_stats_get(m->chan, &stats);
        p = ngx_sprintf(p, "srt:http_requests_overloaded_total"
                        "{model_name=\"%V\"} %uL\n",
                        &m->name, stats.rejected_full);
    }

    p = ngx_sprintf(p,
        "# HELP srt:request_slots_used Channel slots held by requests.\n"
        "# TYPE srt:request_slots_used gauge\n");

    for (i = 0; i < smcf->models.nelts; i++) {
        m = mp[i];
        if (m->chan == NULL) {
            continue;
        }
        srt_chan_stats_get(m->chan, &stats);
        p = ngx_sprintf(p, "srt:request_slots_used{model_name=\"%V\"} %uD\n",
                        &m->name, stats.slots_used);
    }

    for (i = 0; i < smcf->models.nelts; i++) {
        if (mp[i]->chan == NULL
            || srt_chan_metrics_read(mp[i]->chan, &mt, sizeof(mt))
               != sizeof(mt))
        {
            continue;
        }

        n = srt_sched_metrics_prometheus(&mt, mp[i]->cfg.served_name,
                                         (char *) p, SRT_CHAN_METRICS_MAX);
        p += ngx_min(n, SRT_CHAN_METRICS_MAX - 1);
    }

    b->last = p;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type, "text/plain; version=0.0.4");
    r->headers_out.content_type_len = sizeof("text/plain") - 1;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}
