/*
 * srt_admin on: the hook registry of a model's scheduler, at run time.
 *
 *   GET                              list the registered hooks (JSON)
 *   POST ?action=remove&id=N         detach hook N (kept, so it can come back)
 *   POST ?action=remove&name=SPEC    detach every hook of spec SPEC
 *   POST ?action=readd&id=N|name=S   put it back at its place in the order
 *   POST ?action=delete&id=N         drop hook N for good
 *   DELETE ?id=N                     the same as action=delete
 *   &model=NAME picks the model when the http{} block serves several.
 *
 * The registry lives in the scheduler process and has no lock, so the command is
 * posted into the channel's admin mailbox and applied between forward passes; the
 * answer comes back through this worker's doorbell (ngx_http_srt_admin_wake).
 * A timer only bounds the wait and notices a scheduler that went down.
 */

#include "ngx_http_srt_module.h"


#define NGX_HTTP_SRT_ADMIN_TICK     500
#define NGX_HTTP_SRT_ADMIN_TIMEOUT  30000


typedef struct {
    ngx_http_request_t        *request;
    ngx_http_srt_model_t      *model;
    uint64_t                   ticket;
    ngx_queue_t                queue;
    ngx_event_t                timer;
    ngx_msec_t                 deadline;
    ngx_flag_t                 pending;
} ngx_http_srt_admin_ctx_t;


static void ngx_http_srt_admin_finish(ngx_http_srt_admin_ctx_t *ctx,
    ngx_int_t rc);
static ngx_int_t ngx_http_srt_admin_try(ngx_http_srt_admin_ctx_t *ctx);
static void ngx_http_srt_admin_timer(ngx_event_t *ev);
static void ngx_http_srt_admin_cleanup(void *data);


/*
 * srt_admin changes what every request computes: besides allow/deny, it
 * answers only loopback clients unless srt_admin_key is set, and then only
 * requests with "Authorization: Bearer KEY" (compared in constant time).
 */

static ngx_int_t
ngx_http_srt_admin_access(ngx_http_request_t *r)
{
    u_char                    diff;
    size_t                    i;
    ngx_str_t                *key;
    ngx_table_elt_t          *h;
    struct sockaddr_in       *sin;
    ngx_http_srt_loc_conf_t  *slcf;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6      *sin6;
#endif

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_srt_module);
    key = &slcf->admin_key;

    if (key->len == 0) {
        switch (r->connection->sockaddr->sa_family) {

        case AF_INET:
            sin = (struct sockaddr_in *) r->connection->sockaddr;
            if ((ntohl(sin->sin_addr.s_addr) >> 24) == 127) {
                return NGX_OK;
            }
            break;

#if (NGX_HAVE_INET6)
        case AF_INET6:
            sin6 = (struct sockaddr_in6 *) r->connection->sockaddr;
            if (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr)) {
                return NGX_OK;
            }
            break;
#endif

#if (NGX_HAVE_UNIX_DOMAIN)
        case AF_UNIX:
            return NGX_OK;
#endif
        }

        return ngx_http_srt_send_error(r, NGX_HTTP_FORBIDDEN, NULL,
                                       "forbidden",
                                       "srt_admin answers only loopback "
                                       "clients unless srt_admin_key is set");
    }

    h = r->headers_in.authorization;

    if (h != NULL && h->value.len == sizeof("Bearer ") - 1 + key->len
        && ngx_strncasecmp(h->value.data, (u_char *) "Bearer ",
                           sizeof("Bearer ") - 1) == 0)
    {
        diff = 0;
        for (i = 0; i < key->len; i++) {
            diff |= h->value.data[sizeof("Bearer ") - 1 + i] ^ key->data[i];
        }

        if (diff == 0) {
            return NGX_OK;
        }
    }

    r->headers_out.www_authenticate = ngx_list_push(&r->headers_out.headers);
    if (r->headers_out.www_authenticate == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.www_authenticate->hash = 1;
    ngx_str_set(&r->headers_out.www_authenticate->key, "WWW-Authenticate");
    ngx_str_set(&r->headers_out.www_authenticate->value,
                "Bearer realm=\"srt_admin\"");

    return ngx_http_srt_send_error(r, NGX_HTTP_UNAUTHORIZED, NULL,
                                   "unauthorized",
                                   "srt_admin needs \"Authorization: Bearer "
                                   "<srt_admin_key>\"");
}


static ngx_queue_t  ngx_http_srt_admin_waiting;
static ngx_flag_t   ngx_http_srt_admin_inited;


static ngx_int_t
ngx_http_srt_admin_send(ngx_http_request_t *r, ngx_uint_t status, u_char *body,
    size_t len)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    b = ngx_create_temp_buf(r->pool, len + 1);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_cpymem(b->last, body, len);
    *b->last++ = '\n';
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = status;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* An argument, URL-decoded; NGX_DECLINED when absent. */

static ngx_int_t
ngx_http_srt_admin_arg(ngx_http_request_t *r, const char *name, ngx_str_t *out)
{
    u_char     *dst, *src;
    ngx_str_t   v;

    if (ngx_http_arg(r, (u_char *) name, ngx_strlen(name), &v) != NGX_OK) {
        return NGX_DECLINED;
    }

    out->data = ngx_pnalloc(r->pool, v.len + 1);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    src = v.data;
    dst = out->data;
    ngx_unescape_uri(&dst, &src, v.len, 0);
    out->len = dst - out->data;
    out->data[out->len] = '\0';

    return NGX_OK;
}


ngx_int_t
ngx_http_srt_admin_handler(ngx_http_request_t *r)
{
    u_char                     cmd[SRT_CHAN_ADMIN_REQ_MAX], *last;
    ngx_int_t                  rc;
    ngx_str_t                  action, id, name, model;
    ngx_uint_t                 i;
    ngx_pool_cleanup_t        *cln;
    ngx_http_srt_model_t     **mp, *m;
    ngx_http_srt_admin_ctx_t  *ctx;
    ngx_http_srt_main_conf_t  *smcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD|NGX_HTTP_POST
                       |NGX_HTTP_DELETE)))
    {
        return ngx_http_srt_send_error(r, NGX_HTTP_NOT_ALLOWED, NULL, NULL,
                                       "use GET, POST or DELETE");
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    rc = ngx_http_srt_admin_access(r);
    if (rc != NGX_OK) {
        return rc;
    }

    smcf = ngx_http_get_module_main_conf(r, ngx_http_srt_module);
    mp = smcf->models.elts;
    m = NULL;

    rc = ngx_http_srt_admin_arg(r, "model", &model);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < smcf->models.nelts; i++) {
        if (rc == NGX_DECLINED
            || (mp[i]->name.len == model.len
                && ngx_strncmp(mp[i]->name.data, model.data, model.len) == 0))
        {
            m = mp[i];
            break;
        }
    }

    if (m == NULL) {
        return ngx_http_srt_send_error(r, NGX_HTTP_NOT_FOUND, "model", NULL,
                                       rc == NGX_DECLINED
                                       ? "no srt_model is configured"
                                       : "no model named \"%V\"", &model);
    }

    /* the command, checked here so that a bad request never reaches the scheduler */

    if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
        last = ngx_cpymem(cmd, "list", 4);

    } else {
        if (r->method == NGX_HTTP_DELETE) {
            ngx_str_set(&action, "delete");

        } else if (ngx_http_srt_admin_arg(r, "action", &action) != NGX_OK) {
            return ngx_http_srt_send_error(r, NGX_HTTP_BAD_REQUEST, "action",
                                           NULL, "\"action\" is required "
                                           "(remove, readd or delete)");
        }

        if (!(action.len == 6 && ngx_strncmp(action.data, "remove", 6) == 0)
            && !(action.len == 5 && ngx_strncmp(action.data, "readd", 5) == 0)
            && !(action.len == 6 && ngx_strncmp(action.data, "delete", 6) == 0))
        {
            return ngx_http_srt_send_error(r, NGX_HTTP_BAD_REQUEST, "action",
                                           NULL, "unknown action \"%V\" "
                                           "(remove, readd or delete)",
                                           &action);
        }

        if (ngx_http_srt_admin_arg(r, "id", &id) == NGX_OK) {
            if (ngx_atoof(id.data, id.len) <= 0) {
                return ngx_http_srt_send_error(r, NGX_HTTP_BAD_REQUEST, "id",
                                               NULL, "\"id\" must be a "
                                               "positive integer");
            }
            last = ngx_snprintf(cmd, sizeof(cmd) - 1, "%V id %V",
                                &action, &id);

        } else if (ngx_http_srt_admin_arg(r, "name", &name) == NGX_OK) {
            if (name.len == 0 || name.len > 256) {
                return ngx_http_srt_send_error(r, NGX_HTTP_BAD_REQUEST, "name",
                                               NULL, "\"name\" must be 1 to "
                                               "256 bytes");
            }
            for (i = 0; i < name.len; i++) {
                if (name.data[i] < 0x20) {
                    return ngx_http_srt_send_error(r, NGX_HTTP_BAD_REQUEST,
                                                   "name", NULL,
                                                   "\"name\" has a control "
                                                   "character");
                }
            }
            last = ngx_snprintf(cmd, sizeof(cmd) - 1, "%V name %V",
                                &action, &name);

        } else {
            return ngx_http_srt_send_error(r, NGX_HTTP_BAD_REQUEST, "id", NULL,
                                           "give the hook's \"id\" or its "
                                           "spec's \"name\"");
        }
    }

    if (m->chan == NULL
        || srt_chan_sched_state_get(m->chan, NULL, 0) != SRT_CHAN_SCHED_READY)
    {
        return ngx_http_srt_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                       NULL, "the scheduler of model \"%V\" "
                                       "is not serving", &m->name);
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_srt_admin_ctx_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (ctx == NULL || cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = srt_chan_admin_post(m->chan, (char *) cmd, last - cmd, &ctx->ticket);

    if (rc == 1) {
        return ngx_http_srt_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                       NULL, "another admin command is in "
                                       "progress");
    }

    if (rc != SRT_OK) {
        return ngx_http_srt_send_error(r, NGX_HTTP_BAD_REQUEST, NULL, NULL,
                                       "the command is too long");
    }

    ctx->request = r;
    ctx->model = m;
    ctx->pending = 1;
    ctx->deadline = ngx_current_msec + NGX_HTTP_SRT_ADMIN_TIMEOUT;

    cln->handler = ngx_http_srt_admin_cleanup;
    cln->data = ctx;

    if (!ngx_http_srt_admin_inited) {
        ngx_queue_init(&ngx_http_srt_admin_waiting);
        ngx_http_srt_admin_inited = 1;
    }

    ngx_queue_insert_tail(&ngx_http_srt_admin_waiting, &ctx->queue);

    ctx->timer.handler = ngx_http_srt_admin_timer;
    ctx->timer.data = ctx;
    ctx->timer.log = r->connection->log;
    ngx_add_timer(&ctx->timer, NGX_HTTP_SRT_ADMIN_TICK);

    r->main->count++;

    /* a scheduler that was idle may already have answered */
    (void) ngx_http_srt_admin_try(ctx);

    return NGX_DONE;
}


/* The answer, if it came: send it and finish. NGX_OK when finished. */

static ngx_int_t
ngx_http_srt_admin_try(ngx_http_srt_admin_ctx_t *ctx)
{
    int                  status, rc;
    size_t               len;
    u_char              *body;
    ngx_http_request_t  *r;

    if (!ctx->pending) {
        return NGX_OK;
    }

    r = ctx->request;

    body = ngx_pnalloc(r->pool, SRT_CHAN_ADMIN_RESP_MAX);
    if (body == NULL) {
        ngx_http_srt_admin_finish(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return NGX_OK;
    }

    rc = srt_chan_admin_result(ctx->model->chan, ctx->ticket, &status,
                               (char *) body, SRT_CHAN_ADMIN_RESP_MAX, &len);
    if (rc == 0) {
        return NGX_AGAIN;
    }

    if (rc != 1) {
        ngx_http_srt_admin_finish(ctx,
            ngx_http_srt_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                    NULL, "the admin command was lost "
                                    "(scheduler restarted)"));
        return NGX_OK;
    }

    ctx->pending = 0;   /* the mailbox is free already */

    if (status < 200 || status > 599) {
        status = NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_srt_admin_finish(ctx,
        ngx_http_srt_admin_send(r, (ngx_uint_t) status, body, len));
    return NGX_OK;
}


static void
ngx_http_srt_admin_finish(ngx_http_srt_admin_ctx_t *ctx, ngx_int_t rc)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;

    if (ctx->pending) {
        srt_chan_admin_cancel(ctx->model->chan, ctx->ticket);
        ctx->pending = 0;
    }

    if (ctx->queue.next) {
        ngx_queue_remove(&ctx->queue);
        ctx->queue.next = NULL;
    }

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


static void
ngx_http_srt_admin_timer(ngx_event_t *ev)
{
    ngx_http_srt_admin_ctx_t  *ctx = ev->data;

    if (ngx_http_srt_admin_try(ctx) == NGX_OK) {
        return;
    }

    if (srt_chan_sched_state_get(ctx->model->chan, NULL, 0)
        != SRT_CHAN_SCHED_READY)
    {
        ngx_http_srt_admin_finish(ctx,
            ngx_http_srt_send_error(ctx->request, NGX_HTTP_SERVICE_UNAVAILABLE,
                                    NULL, NULL, "the scheduler went down"));
        return;
    }

    if ((ngx_msec_int_t) (ngx_current_msec - ctx->deadline) >= 0) {
        ngx_http_srt_admin_finish(ctx,
            ngx_http_srt_send_error(ctx->request, NGX_HTTP_GATEWAY_TIME_OUT,
                                    NULL, NULL, "the scheduler did not "
                                    "answer the admin command in time"));
        return;
    }

    ngx_add_timer(&ctx->timer, NGX_HTTP_SRT_ADMIN_TICK);
}


/* The request is going away (client gone, finalized): leave the mailbox free. */

static void
ngx_http_srt_admin_cleanup(void *data)
{
    ngx_http_srt_admin_ctx_t  *ctx = data;

    if (ctx->pending) {
        srt_chan_admin_cancel(ctx->model->chan, ctx->ticket);
        ctx->pending = 0;
    }

    if (ctx->queue.next) {
        ngx_queue_remove(&ctx->queue);
        ctx->queue.next = NULL;
    }

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
}


/* From the model's doorbell handler: answers may have come. */

void
ngx_http_srt_admin_wake(ngx_http_srt_model_t *m)
{
    ngx_queue_t               *q, *next;
    ngx_http_srt_admin_ctx_t  *ctx;

    if (!ngx_http_srt_admin_inited) {
        return;
    }

    for (q = ngx_queue_head(&ngx_http_srt_admin_waiting);
         q != ngx_queue_sentinel(&ngx_http_srt_admin_waiting);
         q = next)
    {
        next = ngx_queue_next(q);
        ctx = ngx_queue_data(q, ngx_http_srt_admin_ctx_t, queue);

        if (ctx->model == m) {
            (void) ngx_http_srt_admin_try(ctx);
        }
    }
}
