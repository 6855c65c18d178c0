/*
 * ngx_http_srt_upstream_module: srt_prefix_affinity, a cache-aware balancer for
 * nginx's own upstream{} blocks (used with proxy_pass, keepalive, proxy_next_upstream).
 *
 *   upstream llm {
 *       srt_prefix_affinity model=/models/smollm2.gguf load_threshold=4 tree=16m;
 *       server 10.0.0.1:8080 max_fails=1 fail_timeout=10s;
 *       server 10.0.0.2:8080;
 *       keepalive 16;
 *   }
 *
 * The front renders the chat template and tokenizes exactly as a node's worker does (tokenizer
 * and template only: no model is loaded here), then matches the prompt's token prefix against
 * what it has sent to each peer. That record is an approximate radix tree over blocks of
 * `block` tokens, kept in shared memory for all workers: a node is a path from the root, keyed
 * by a hash of every token on it, and holds the set of peers it was sent to. Nodes are LRU
 * ordered with parents always younger than their children, so evicting the oldest node never
 * orphans a live path; the zone's size bounds the tree.
 *
 * The choice: the usable peer with the longest match, unless its load (requests in flight
 * from this front, all workers, or the count the peer itself last reported in X-Srt-Load,
 * whichever is larger) exceeds the least loaded peer's by more than load_threshold;
 * then, and when nobody has the prefix, the least loaded (ties: the smaller tree, so new
 * conversations spread). Peers nginx considers down (down, or max_fails within fail_timeout)
 * are skipped and their entries dropped: their caches are cold when they come back, or gone.
 *
 * proxy_pass reads the whole body before it asks for a peer (proxy_request_buffering on, the
 * default), so init_peer finds it in r->request_body. Without a body, or one it cannot read,
 * the choice is by load alone. A retry (proxy_next_upstream) asks again, with the tried peers
 * excluded; nginx retries only while nothing has gone to the client.
 *
 * On a node, $srt_load is what its model holds (requests running and waiting), for
 * `add_header X-Srt-Load $srt_load always;`.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <yajl/yajl_tree.h>
#include <yajl/yajl_gen.h>

#include "ngx_http_srt_module.h"

/* nginx finds this module through ngx_modules; nothing here is exported (see
 * ngx_http_srt_module.h). */
#pragma GCC visibility push(hidden)


#define NGX_HTTP_SRT_AFF_MAX_PEERS    64     /* one bit each in a node */
#define NGX_HTTP_SRT_AFF_MAX_BLOCKS   8192   /* longest prefix tracked, in blocks */
#define NGX_HTTP_SRT_AFF_MAX_BODY     (16 * 1024 * 1024)
#define NGX_HTTP_SRT_AFF_REPORT_TTL   2000   /* ms a peer's X-Srt-Load counts */


typedef struct {
    ngx_atomic_t                     inflight;  /* requests at this peer now */
    uint32_t                         name;      /* crc32 of the server it is */
    ngx_atomic_t                     reported;  /* its X-Srt-Load, all fronts' */
    ngx_atomic_t                     reported_at; /* ngx_current_msec of it */
    ngx_uint_t                       blocks;    /* tree nodes carrying its bit */
} ngx_http_srt_aff_peer_sh_t;


typedef struct {
    ngx_rbtree_t                     rbtree;
    ngx_rbtree_node_t                sentinel;
    ngx_queue_t                      lru;       /* head: most recent */
    ngx_uint_t                       nodes;
    ngx_uint_t                       npeers;
    ngx_http_srt_aff_peer_sh_t       peer[NGX_HTTP_SRT_AFF_MAX_PEERS];
} ngx_http_srt_aff_sh_t;


typedef struct {
    ngx_rbtree_node_t                node;      /* key: the path's hash */
    ngx_queue_t                      queue;
    uint64_t                         peers;     /* bit i: sent to peer i */
} ngx_http_srt_aff_node_t;


typedef struct {
    ngx_str_t                        model;
    ngx_str_t                        chat_template;
    ngx_uint_t                       block;
    ngx_uint_t                       threshold;
    size_t                           size;

    srt_tokenizer                   *tok;
    srt_chat_template               *tmpl;
    char                            *bos_token;
    char                            *eos_token;

    ngx_shm_zone_t                  *zone;
    ngx_slab_pool_t                 *shpool;
    ngx_http_srt_aff_sh_t           *sh;
} ngx_http_srt_aff_conf_t;


typedef struct {
    /* the first member: round robin's own functions take this structure */
    ngx_http_upstream_rr_peer_data_t   rrp;

    ngx_http_srt_aff_conf_t         *conf;
    ngx_http_request_t              *request;
    uint64_t                        *hashes;
    ngx_uint_t                       nblocks;
    ngx_uint_t                       ntokens;
    ngx_int_t                        counted;   /* peer whose inflight we hold */
    ngx_uint_t                       matched;   /* tokens matched at the choice */
    const char                      *why;       /* "prefix", "load", "balance" */
} ngx_http_srt_aff_data_t;


static void *ngx_http_srt_aff_create_conf(ngx_conf_t *cf);
static char *ngx_http_srt_prefix_affinity(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_srt_aff_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_srt_aff_init(ngx_conf_t *cf,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_srt_aff_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_srt_aff_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_srt_aff_get_peer(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_srt_aff_free_peer(ngx_peer_connection_t *pc,
    void *data, ngx_uint_t state);
static ngx_int_t ngx_http_srt_aff_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_command_t  ngx_http_srt_upstream_commands[] = {

    { ngx_string("srt_prefix_affinity"),
      NGX_HTTP_UPS_CONF|NGX_CONF_1MORE,
      ngx_http_srt_prefix_affinity,
      NGX_HTTP_SRV_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_srt_upstream_module_ctx = {
    ngx_http_srt_aff_add_variables,        /* preconfiguration */
    NULL,                                  /* postconfiguration */

    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */

    ngx_http_srt_aff_create_conf,          /* create server configuration */
    NULL,                                  /* merge server configuration */

    NULL,                                  /* create location configuration */
    NULL                                   /* merge location configuration */
};


ngx_module_t  ngx_http_srt_upstream_module = {
    NGX_MODULE_V1,
    &ngx_http_srt_upstream_module_ctx,     /* module context */
    ngx_http_srt_upstream_commands,        /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_int_t ngx_http_srt_load_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_http_variable_t  ngx_http_srt_aff_vars[] = {

    /* "prefix 96/120": why the peer was chosen, tokens matched there / prompt tokens */
    { ngx_string("srt_prefix_affinity"), NULL, ngx_http_srt_aff_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    /* on a node: the requests its model holds (running and waiting), for
     * `add_header X-Srt-Load $srt_load always;` that fronts read */
    { ngx_string("srt_load"), NULL, ngx_http_srt_load_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static void *
ngx_http_srt_aff_create_conf(ngx_conf_t *cf)
{
    ngx_http_srt_aff_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_srt_aff_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    conf->block = NGX_CONF_UNSET_UINT;

    return conf;
}


static ngx_int_t
ngx_http_srt_aff_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_srt_aff_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


/* ---- configuration: the tokenizer and template, the zone ---- */

static void
ngx_http_srt_aff_cleanup(void *data)
{
    ngx_http_srt_aff_conf_t  *conf = data;

    if (conf->tmpl) {
        srt_chat_template_free(conf->tmpl);
    }

    if (conf->tok) {
        srt_tokenizer_free(conf->tok);
    }

    free(conf->bos_token);
    free(conf->eos_token);
}


/* The same files a node's worker reads (ngx_http_srt_worker_init), at
 * configuration time: nginx -t reports a tokenizer or template it cannot use. */

static char *
ngx_http_srt_aff_load(ngx_conf_t *cf, ngx_http_srt_aff_conf_t *conf)
{
    char                *path;
    srt_err              err;
    srt_frontend         fe;
    ngx_file_info_t      fi;
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_srt_aff_cleanup;
    cln->data = conf;

    path = (char *) conf->model.data;
    err.msg[0] = '\0';

    if (ngx_file_info(path, &fi) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "srt_prefix_affinity: cannot read \"%s\"", path);
        return NGX_CONF_ERROR;
    }

    if (srt_frontend_load(path, conf->chat_template.len
                                ? (char *) conf->chat_template.data : NULL,
                          &fe, &err)
        != SRT_OK)
    {
        goto failed;
    }

    conf->tok = fe.tok;
    conf->tmpl = fe.tmpl;
    conf->bos_token = fe.bos_token;
    conf->eos_token = fe.eos_token;

    return NGX_CONF_OK;

failed:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "srt_prefix_affinity \"%V\": %s",
                       &conf->model, err.msg);

    return NGX_CONF_ERROR;
}


static char *
ngx_http_srt_prefix_affinity(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_srt_aff_conf_t *acf = conf;

    ssize_t                        size;
    ngx_int_t                      n;
    ngx_str_t                     *value, s, name;
    ngx_uint_t                     i;
    ngx_http_upstream_srv_conf_t  *uscf;

    if (acf->model.len) {
        return "is duplicate";
    }

    uscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_upstream_module);

    if (uscf->peer.init_upstream) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "load balancing method redefined");
    }

    acf->block = 16;
    acf->threshold = 4;
    acf->size = 16 * 1024 * 1024;

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "model=", 6) == 0) {
            acf->model.data = value[i].data + 6;
            acf->model.len = value[i].len - 6;
            if (acf->model.len == 0
                || ngx_conf_full_name(cf->cycle, &acf->model, 0) != NGX_OK)
            {
                goto invalid;
            }
            continue;
        }

        if (ngx_strncmp(value[i].data, "chat_template=", 14) == 0) {
            acf->chat_template.data = value[i].data + 14;
            acf->chat_template.len = value[i].len - 14;
            if (acf->chat_template.len == 0
                || ngx_conf_full_name(cf->cycle, &acf->chat_template, 0)
                   != NGX_OK)
            {
                goto invalid;
            }
            continue;
        }

        if (ngx_strncmp(value[i].data, "block=", 6) == 0) {
            n = ngx_atoi(value[i].data + 6, value[i].len - 6);
            if (n < 1 || n > 4096) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "srt_prefix_affinity: \"block\" must be "
                                   "between 1 and 4096 tokens, not \"%V\"",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }
            acf->block = n;
            continue;
        }

        if (ngx_strncmp(value[i].data, "load_threshold=", 15) == 0) {
            n = ngx_atoi(value[i].data + 15, value[i].len - 15);
            if (n == NGX_ERROR) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "srt_prefix_affinity: \"load_threshold\" "
                                   "must be a number of requests, not \"%V\"",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }
            acf->threshold = n;
            continue;
        }

        if (ngx_strncmp(value[i].data, "tree=", 5) == 0) {
            s.data = value[i].data + 5;
            s.len = value[i].len - 5;
            size = ngx_parse_size(&s);
            if (size == NGX_ERROR || size < (ssize_t) (8 * ngx_pagesize)) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "srt_prefix_affinity: \"tree\" must be a "
                                   "size of at least %uzk, not \"%V\"",
                                   8 * ngx_pagesize / 1024, &value[i]);
                return NGX_CONF_ERROR;
            }
            acf->size = size;
            continue;
        }

        goto invalid;
    }

    if (acf->model.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "srt_prefix_affinity needs \"model=PATH\": the "
                           "model whose tokenizer and chat template the "
                           "peers use");
        return NGX_CONF_ERROR;
    }

    if (ngx_http_srt_aff_load(cf, acf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    name.len = sizeof("srt_prefix_affinity:") - 1 + uscf->host.len;
    name.data = ngx_pnalloc(cf->pool, name.len);
    if (name.data == NULL) {
        return NGX_CONF_ERROR;
    }
    ngx_sprintf(name.data, "srt_prefix_affinity:%V", &uscf->host);

    acf->zone = ngx_shared_memory_add(cf, &name, acf->size,
                                      &ngx_http_srt_upstream_module);
    if (acf->zone == NULL) {
        return NGX_CONF_ERROR;
    }

    acf->zone->init = ngx_http_srt_aff_init_zone;
    acf->zone->data = acf;

    uscf->peer.init_upstream = ngx_http_srt_aff_init;

    uscf->flags = NGX_HTTP_UPSTREAM_CREATE
                  |NGX_HTTP_UPSTREAM_WEIGHT
                  |NGX_HTTP_UPSTREAM_MAX_CONNS
                  |NGX_HTTP_UPSTREAM_MAX_FAILS
                  |NGX_HTTP_UPSTREAM_FAIL_TIMEOUT
                  |NGX_HTTP_UPSTREAM_DOWN
                  |NGX_HTTP_UPSTREAM_BACKUP;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "srt_prefix_affinity: invalid parameter \"%V\" "
                       "(model=PATH, chat_template=FILE, block=N, "
                       "load_threshold=N, tree=SIZE)", &value[i]);

    return NGX_CONF_ERROR;
}


static ngx_int_t
ngx_http_srt_aff_init(ngx_conf_t *cf, ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_upstream_rr_peers_t  *peers;

    if (ngx_http_upstream_init_round_robin(cf, us) != NGX_OK) {
        return NGX_ERROR;
    }

    peers = us->peer.data;

    if (peers->number > NGX_HTTP_SRT_AFF_MAX_PEERS) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "srt_prefix_affinity: upstream \"%V\" has %ui peers, "
                      "at most %d are supported",
                      &us->host, peers->number, NGX_HTTP_SRT_AFF_MAX_PEERS);
        return NGX_ERROR;
    }

    us->peer.init = ngx_http_srt_aff_init_peer;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_aff_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_srt_aff_conf_t  *oacf = data;

    ngx_slab_pool_t          *shpool;
    ngx_http_srt_aff_conf_t  *acf;
    ngx_http_srt_aff_sh_t    *sh;

    acf = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    acf->shpool = shpool;

    /* a reload keeps the tree and the in-flight counts: peers keep their caches */
    if (oacf && oacf->sh) {
        acf->sh = oacf->sh;
        return NGX_OK;
    }

    if (shm_zone->shm.exists) {
        acf->sh = shpool->data;
        return NGX_OK;
    }

    sh = ngx_slab_calloc(shpool, sizeof(ngx_http_srt_aff_sh_t));
    if (sh == NULL) {
        return NGX_ERROR;
    }

    ngx_rbtree_init(&sh->rbtree, &sh->sentinel, ngx_rbtree_insert_value);
    ngx_queue_init(&sh->lru);

    acf->sh = sh;
    shpool->data = sh;

    /* the slab allocator's failures are the tree's LRU bound, not errors */
    shpool->log_nomem = 0;

    return NGX_OK;
}


/* ---- the request's key: its prompt as token ids, hashed per block ---- */

/* A message as the node's worker hands it to the template: content parts joined. */

static void
ngx_http_srt_aff_gen_message(yajl_gen g, yajl_val msg)
{
    size_t    i, j;
    yajl_val  content, part, text;
    u_char   *buf, *p;
    size_t    total;

    yajl_gen_map_open(g);

    for (i = 0; i < msg->u.object.len; i++) {
        if (ngx_strcmp(msg->u.object.keys[i], "content") != 0) {
            ngx_http_srt_gen_str(g, msg->u.object.keys[i]);
            ngx_http_srt_gen_val(g, msg->u.object.values[i]);
        }
    }

    ngx_http_srt_gen_str(g, "content");

    content = ngx_http_srt_member(msg, "content");

    if (!YAJL_IS_ARRAY(content)) {
        ngx_http_srt_gen_val(g, content);
        yajl_gen_map_close(g);
        return;
    }

    total = 0;
    for (j = 0; j < content->u.array.len; j++) {
        part = content->u.array.values[j];
        text = ngx_http_srt_member(part, "text");
        if (YAJL_IS_STRING(text)) {
            total += ngx_strlen(text->u.string);
        }
    }

    buf = malloc(total + 1);
    if (buf == NULL) {
        yajl_gen_null(g);
        yajl_gen_map_close(g);
        return;
    }

    p = buf;
    for (j = 0; j < content->u.array.len; j++) {
        text = ngx_http_srt_member(content->u.array.values[j], "text");
        if (YAJL_IS_STRING(text)) {
            p = ngx_cpymem(p, text->u.string, ngx_strlen(text->u.string));
        }
    }
    *p = '\0';

    ngx_http_srt_gen_str(g, (char *) buf);
    free(buf);

    yajl_gen_map_close(g);
}


/* Token ids of a chat request (the template rendered as a node renders it) or
 * of a completion's prompt. NGX_DECLINED: nothing to route on. */

static ngx_int_t
ngx_http_srt_aff_tokens(ngx_http_srt_aff_conf_t *acf, yajl_val root,
    int32_t **ids, size_t *n)
{
    int                   rc;
    char                 *text;
    size_t                i, len, ctx_len;
    srt_err               err;
    yajl_gen              g;
    yajl_val              v, e;
    const unsigned char  *ctx;

    v = ngx_http_srt_member(root, "messages");

    if (v != NULL) {
        if (acf->tmpl == NULL || !YAJL_IS_ARRAY(v)) {
            return NGX_DECLINED;
        }

        for (i = 0; i < v->u.array.len; i++) {
            if (!YAJL_IS_OBJECT(v->u.array.values[i])) {
                return NGX_DECLINED;
            }
        }

        g = yajl_gen_alloc(NULL);
        if (g == NULL) {
            return NGX_ERROR;
        }

        yajl_gen_map_open(g);
        ngx_http_srt_gen_str(g, "messages");
        yajl_gen_array_open(g);
        for (i = 0; i < v->u.array.len; i++) {
            ngx_http_srt_aff_gen_message(g, v->u.array.values[i]);
        }
        yajl_gen_array_close(g);
        (void) srt_chat_context_gen_common(g, acf->bos_token, acf->eos_token);
        ngx_http_srt_gen_str(g, "tools");
        ngx_http_srt_gen_val(g, ngx_http_srt_member(root, "tools"));
        ngx_http_srt_gen_str(g, "documents");
        yajl_gen_null(g);
        yajl_gen_map_close(g);

        if (yajl_gen_get_buf(g, &ctx, &ctx_len) != yajl_gen_status_ok
            || srt_chat_template_render(acf->tmpl, (const char *) ctx,
                                        ctx_len, &text, &len, &err)
               != SRT_OK)
        {
            yajl_gen_free(g);
            return NGX_DECLINED;
        }

        yajl_gen_free(g);

        rc = srt_tokenizer_encode_alloc(acf->tok, text, len,
                                        SRT_TOK_PARSE_SPECIAL, ids, n, &err);
        srt_chat_template_free_output(text);

        return rc == SRT_OK ? NGX_OK : NGX_DECLINED;
    }

    v = ngx_http_srt_member(root, "prompt");

    if (YAJL_IS_ARRAY(v) && v->u.array.len == 1
        && (YAJL_IS_STRING(v->u.array.values[0])
            || YAJL_IS_ARRAY(v->u.array.values[0])))
    {
        v = v->u.array.values[0];
    }

    if (YAJL_IS_STRING(v)) {
        return srt_tokenizer_encode_alloc(acf->tok, v->u.string,
                                          ngx_strlen(v->u.string),
                                          SRT_TOK_PARSE_SPECIAL
                                          |SRT_TOK_ADD_SPECIAL,
                                          ids, n, &err)
               == SRT_OK ? NGX_OK : NGX_DECLINED;
    }

    if (!YAJL_IS_ARRAY(v) || v->u.array.len == 0) {
        return NGX_DECLINED;
    }

    *ids = malloc(v->u.array.len * sizeof(int32_t));
    if (*ids == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < v->u.array.len; i++) {
        e = v->u.array.values[i];
        if (!YAJL_IS_INTEGER(e)) {
            free(*ids);
            return NGX_DECLINED;
        }
        (*ids)[i] = (int32_t) YAJL_GET_INTEGER(e);
    }

    *n = v->u.array.len;

    return NGX_OK;
}


/* Block i's key hashes every token of blocks 0..i (FNV-1a, 64 bits), starting
 * from the request's cache namespace: equal keys mean equal paths from the root
 * of one namespace, up to a collision nobody will meet. */

static void
ngx_http_srt_aff_hash(ngx_http_srt_aff_data_t *ad, uint64_t ns, int32_t *ids,
    size_t n)
{
    size_t      i, b, nb;
    uint32_t    t;
    uint64_t    h;

    nb = n / ad->conf->block;
    if (nb > NGX_HTTP_SRT_AFF_MAX_BLOCKS) {
        nb = NGX_HTTP_SRT_AFF_MAX_BLOCKS;
    }

    ad->hashes = ngx_palloc(ad->request->pool, (nb ? nb : 1) * sizeof(uint64_t));
    if (ad->hashes == NULL) {
        return;
    }

    h = ns;

    for (b = 0; b < nb; b++) {
        for (i = b * ad->conf->block; i < (b + 1) * ad->conf->block; i++) {
            t = (uint32_t) ids[i];
            h = (h ^ (t & 0xff)) * 0x100000001b3ULL;
            h = (h ^ ((t >> 8) & 0xff)) * 0x100000001b3ULL;
            h = (h ^ ((t >> 16) & 0xff)) * 0x100000001b3ULL;
            h = (h ^ (t >> 24)) * 0x100000001b3ULL;
        }
        ad->hashes[b] = h;
    }

    ad->nblocks = nb;
    ad->ntokens = n;
}


/*
 * A node keeps prefixes computed for one "cache_salt" and selection of
 * per-request "hooks" apart from every other's (its radix cache is namespaced
 * by them), so the front's tree is too: the chain of block hashes starts from
 * a hash of both fields as the request spells them.
 */

static uint64_t
ngx_http_srt_aff_namespace(yajl_val root)
{
    size_t                i, len;
    uint64_t              h;
    yajl_gen              g;
    yajl_val              v;
    const unsigned char  *buf;
    static const char    *keys[] = { "cache_salt", "hooks" };

    h = 0xcbf29ce484222325ULL;

    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        v = ngx_http_srt_member(root, keys[i]);
        if (v == NULL || YAJL_IS_NULL(v)) {
            continue;
        }

        g = yajl_gen_alloc(NULL);
        if (g == NULL) {
            continue;
        }

        yajl_gen_array_open(g);
        ngx_http_srt_gen_str(g, keys[i]);
        ngx_http_srt_gen_val(g, v);
        yajl_gen_array_close(g);

        if (yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok) {
            while (len--) {
                h = (h ^ *buf++) * 0x100000001b3ULL;
            }
        }

        yajl_gen_free(g);
    }

    return h;
}


static ngx_int_t
ngx_http_srt_aff_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    u_char                   *body;
    size_t                    len, n;
    int32_t                  *ids;
    yajl_val                  root;
    ngx_http_srt_aff_data_t  *ad;

    ad = ngx_pcalloc(r->pool, sizeof(ngx_http_srt_aff_data_t));
    if (ad == NULL) {
        return NGX_ERROR;
    }

    r->upstream->peer.data = &ad->rrp;

    if (ngx_http_upstream_init_round_robin_peer(r, us) != NGX_OK) {
        return NGX_ERROR;
    }

    r->upstream->peer.get = ngx_http_srt_aff_get_peer;
    r->upstream->peer.free = ngx_http_srt_aff_free_peer;

    ad->conf = ngx_http_conf_upstream_srv_conf(us,
                                               ngx_http_srt_upstream_module);
    ad->request = r;
    ad->counted = -1;

    ngx_http_set_ctx(r, ad, ngx_http_srt_upstream_module);

    /* proxy_pass has read the body (it may be in a temp file) */
    body = ngx_http_srt_body(r, NGX_HTTP_SRT_AFF_MAX_BODY, &len);
    if (body == NULL || len == 0
        || srt_json_depth((char *) body, len) > SRT_JSON_MAX_DEPTH)
    {
        return NGX_OK;
    }

    root = yajl_tree_parse((const char *) body, NULL, 0);
    if (root == NULL) {
        return NGX_OK;
    }

    ids = NULL;
    n = 0;

    if (ngx_http_srt_aff_tokens(ad->conf, root, &ids, &n) == NGX_OK) {
        ngx_http_srt_aff_hash(ad, ngx_http_srt_aff_namespace(root), ids, n);
        free(ids);
    }

    yajl_tree_free(root);

    return NGX_OK;
}


/* ---- the tree (callers hold the zone's mutex) ---- */

static ngx_http_srt_aff_node_t *
ngx_http_srt_aff_lookup(ngx_http_srt_aff_sh_t *sh, uint64_t key)
{
    ngx_rbtree_node_t  *node, *sentinel;

    node = sh->rbtree.root;
    sentinel = sh->rbtree.sentinel;

    while (node != sentinel) {
        if ((uint64_t) node->key == key) {
            return (ngx_http_srt_aff_node_t *) node;
        }

        node = (key < (uint64_t) node->key) ? node->left : node->right;
    }

    return NULL;
}


static void
ngx_http_srt_aff_unbit(ngx_http_srt_aff_sh_t *sh, uint64_t peers)
{
    ngx_uint_t  i;

    for (i = 0; i < sh->npeers && i < NGX_HTTP_SRT_AFF_MAX_PEERS; i++) {
        if ((peers & ((uint64_t) 1 << i)) && sh->peer[i].blocks) {
            sh->peer[i].blocks--;
        }
    }
}


static void
ngx_http_srt_aff_delete(ngx_http_srt_aff_conf_t *acf,
    ngx_http_srt_aff_node_t *an)
{
    ngx_http_srt_aff_unbit(acf->sh, an->peers);
    ngx_queue_remove(&an->queue);
    ngx_rbtree_delete(&acf->sh->rbtree, &an->node);
    ngx_slab_free_locked(acf->shpool, an);
    acf->sh->nodes--;
}


/* A peer that went down: its cache is cold or gone. */

static void
ngx_http_srt_aff_expire(ngx_http_srt_aff_conf_t *acf, ngx_uint_t p)
{
    uint64_t                  bit;
    ngx_queue_t              *q, *next;
    ngx_http_srt_aff_node_t  *an;

    bit = (uint64_t) 1 << p;

    for (q = ngx_queue_head(&acf->sh->lru);
         q != ngx_queue_sentinel(&acf->sh->lru);
         q = next)
    {
        next = ngx_queue_next(q);
        an = ngx_queue_data(q, ngx_http_srt_aff_node_t, queue);

        if (an->peers & bit) {
            an->peers &= ~bit;
            if (an->peers == 0) {
                ngx_queue_remove(&an->queue);
                ngx_rbtree_delete(&acf->sh->rbtree, &an->node);
                ngx_slab_free_locked(acf->shpool, an);
                acf->sh->nodes--;
            }
        }
    }

    acf->sh->peer[p].blocks = 0;
}


/* Record that the prompt's blocks went to peer p. Leaf first, so that the
 * root end of the path is the youngest in the LRU and is evicted last. */

static void
ngx_http_srt_aff_insert(ngx_http_srt_aff_data_t *ad, ngx_uint_t p)
{
    ngx_int_t                 i;
    ngx_queue_t              *q;
    ngx_http_srt_aff_sh_t    *sh;
    ngx_http_srt_aff_node_t  *an;
    ngx_http_srt_aff_conf_t  *acf;

    acf = ad->conf;
    sh = acf->sh;

    for (i = (ngx_int_t) ad->nblocks - 1; i >= 0; i--) {
        an = ngx_http_srt_aff_lookup(sh, ad->hashes[i]);

        if (an == NULL) {
            for ( ;; ) {
                an = ngx_slab_alloc_locked(acf->shpool,
                                           sizeof(ngx_http_srt_aff_node_t));
                if (an != NULL || ngx_queue_empty(&sh->lru)) {
                    break;
                }

                q = ngx_queue_last(&sh->lru);
                ngx_http_srt_aff_delete(acf,
                                 ngx_queue_data(q, ngx_http_srt_aff_node_t,
                                                queue));
            }

            if (an == NULL) {
                return;
            }

            an->node.key = (ngx_rbtree_key_t) ad->hashes[i];
            an->peers = 0;
            ngx_rbtree_insert(&sh->rbtree, &an->node);
            ngx_queue_insert_head(&sh->lru, &an->queue);
            sh->nodes++;

        } else {
            ngx_queue_remove(&an->queue);
            ngx_queue_insert_head(&sh->lru, &an->queue);
        }

        if (!(an->peers & ((uint64_t) 1 << p))) {
            an->peers |= (uint64_t) 1 << p;
            sh->peer[p].blocks++;
        }
    }
}


/* Blocks matched at each peer of `usable`: the walk stops where no usable
 * peer has the path any more. */

static void
ngx_http_srt_aff_match(ngx_http_srt_aff_data_t *ad, uint64_t usable,
    ngx_uint_t *len)
{
    uint64_t                  cur, next, gone;
    ngx_uint_t                b, p;
    ngx_http_srt_aff_node_t  *an;

    cur = usable;

    for (b = 0; b < ad->nblocks && cur; b++) {
        an = ngx_http_srt_aff_lookup(ad->conf->sh, ad->hashes[b]);
        next = an ? cur & an->peers : 0;
        gone = cur & ~next;

        for (p = 0; gone; p++, gone >>= 1) {
            if (gone & 1) {
                len[p] = b;
            }
        }

        cur = next;
    }

    for (p = 0; cur; p++, cur >>= 1) {
        if (cur & 1) {
            len[p] = ad->nblocks;
        }
    }
}


/* ---- the balancer ---- */

/*
 * A peer's load: the requests this front has in flight there, or what the peer
 * itself last said it holds (X-Srt-Load, which counts every front's requests),
 * whichever is larger, as long as that report is fresh.
 */

static ngx_uint_t
ngx_http_srt_aff_load_of(ngx_http_srt_aff_sh_t *sh, ngx_uint_t i)
{
    ngx_uint_t  load, rep;

    load = sh->peer[i].inflight;
    rep = sh->peer[i].reported;

    if (rep > load
        && (ngx_msec_int_t) (ngx_current_msec - sh->peer[i].reported_at)
           < NGX_HTTP_SRT_AFF_REPORT_TTL)
    {
        load = rep;
    }

    return load;
}


static void
ngx_http_srt_aff_read_report(ngx_http_srt_aff_data_t *ad, ngx_uint_t i)
{
    ngx_int_t             n;
    ngx_uint_t            k;
    ngx_list_part_t      *part;
    ngx_table_elt_t      *h;
    ngx_http_upstream_t  *u;

    u = ad->request->upstream;
    if (u == NULL || u->headers_in.status_n == 0) {
        return;
    }

    part = &u->headers_in.headers.part;
    h = part->elts;

    for (k = 0; /* void */; k++) {

        if (k >= part->nelts) {
            if (part->next == NULL) {
                return;
            }
            part = part->next;
            h = part->elts;
            k = 0;
        }

        if (h[k].key.len == sizeof("X-Srt-Load") - 1
            && ngx_strncasecmp(h[k].key.data, (u_char *) "X-Srt-Load",
                               sizeof("X-Srt-Load") - 1) == 0)
        {
            n = ngx_atoi(h[k].value.data, h[k].value.len);
            if (n >= 0) {
                ad->conf->sh->peer[i].reported = n;
                ad->conf->sh->peer[i].reported_at = ngx_current_msec;
            }
            return;
        }
    }
}

static ngx_int_t
ngx_http_srt_aff_get_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_srt_aff_data_t *ad = data;

    time_t                             now;
    uint32_t                           crc;
    uint64_t                           usable, bit;
    uintptr_t                          m;
    ngx_uint_t                         i, n, best, least, load, lo, bl;
    ngx_uint_t                         len[NGX_HTTP_SRT_AFF_MAX_PEERS];
    ngx_http_srt_aff_sh_t             *sh;
    ngx_http_srt_aff_conf_t           *acf;
    ngx_http_upstream_rr_peer_t       *peer, *p[NGX_HTTP_SRT_AFF_MAX_PEERS];
    ngx_http_upstream_rr_peers_t      *peers;
    ngx_http_upstream_rr_peer_data_t  *rrp;

    rrp = &ad->rrp;
    acf = ad->conf;
    sh = acf->sh;
    peers = rrp->peers;

    ad->counted = -1;
    ad->matched = 0;

    pc->cached = 0;
    pc->connection = NULL;

    now = ngx_time();

    ngx_http_upstream_rr_peers_wlock(peers);

    /* the primary peers this request may use; the down ones lose their entries */

    usable = 0;

    ngx_shmtx_lock(&acf->shpool->mutex);

    sh->npeers = peers->number;

    for (peer = peers->peer, i = 0;
         peer && i < NGX_HTTP_SRT_AFF_MAX_PEERS;
         peer = peer->next, i++)
    {
        p[i] = peer;
        len[i] = 0;

        /* a reload that changed the servers: this bit meant another one */
        crc = ngx_crc32_short(peer->name.data, peer->name.len);
        if (sh->peer[i].name != crc) {
            ngx_http_srt_aff_expire(acf, i);
            sh->peer[i].name = crc;
        }

        n = i / (8 * sizeof(uintptr_t));
        m = (uintptr_t) 1 << i % (8 * sizeof(uintptr_t));

        if (peer->down
            || (peer->max_fails && peer->fails >= peer->max_fails
                && now - peer->checked <= peer->fail_timeout))
        {
            if (sh->peer[i].blocks) {
                ngx_http_srt_aff_expire(acf, i);
            }
            continue;
        }

        if (rrp->tried[n] & m) {
            continue;
        }

        if (peer->max_conns && peer->conns >= peer->max_conns) {
            continue;
        }

        usable |= (uint64_t) 1 << i;
    }

    if (usable == 0 || peers->single) {
        ngx_shmtx_unlock(&acf->shpool->mutex);
        ngx_http_upstream_rr_peers_unlock(peers);

        /* backups, or "no live upstreams": round robin says it as nginx does */
        ad->why = "round-robin";
        return ngx_http_upstream_get_round_robin_peer(pc, rrp);
    }

    ngx_http_srt_aff_match(ad, usable, len);

    /* the longest match, then the least loaded */

    best = NGX_HTTP_SRT_AFF_MAX_PEERS;
    least = NGX_HTTP_SRT_AFF_MAX_PEERS;
    bl = 0;
    lo = 0;

    for (i = 0; i < peers->number && i < NGX_HTTP_SRT_AFF_MAX_PEERS; i++) {
        bit = (uint64_t) 1 << i;
        if (!(usable & bit)) {
            continue;
        }

        load = ngx_http_srt_aff_load_of(sh, i);

        if (least == NGX_HTTP_SRT_AFF_MAX_PEERS || load < lo
            || (load == lo && sh->peer[i].blocks < sh->peer[least].blocks))
        {
            least = i;
            lo = load;
        }

        if (len[i] == 0) {
            continue;
        }

        if (best == NGX_HTTP_SRT_AFF_MAX_PEERS || len[i] > len[best]
            || (len[i] == len[best] && load < bl))
        {
            best = i;
            bl = load;
        }
    }

    if (best == NGX_HTTP_SRT_AFF_MAX_PEERS) {
        best = least;
        ad->why = "load";

    } else if (bl > lo + acf->threshold) {
        best = least;
        ad->why = "balance";

    } else {
        ad->why = "prefix";
    }

    ad->matched = len[best] * acf->block;

    ngx_http_srt_aff_insert(ad, best);

    (void) ngx_atomic_fetch_add(&sh->peer[best].inflight, 1);
    ad->counted = best;

    ngx_shmtx_unlock(&acf->shpool->mutex);

    peer = p[best];

    rrp->current = peer;

    n = best / (8 * sizeof(uintptr_t));
    m = (uintptr_t) 1 << best % (8 * sizeof(uintptr_t));
    rrp->tried[n] |= m;

    peer->conns++;

    if (now - peer->checked > peer->fail_timeout) {
        peer->checked = now;
    }

    pc->sockaddr = peer->sockaddr;
    pc->socklen = peer->socklen;
    pc->name = &peer->name;

    ngx_http_upstream_rr_peers_unlock(peers);

    return NGX_OK;
}


static void
ngx_http_srt_aff_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    ngx_http_srt_aff_data_t *ad = data;

    if (ad->counted >= 0) {
        ngx_http_srt_aff_read_report(ad, ad->counted);
        (void) ngx_atomic_fetch_add(&ad->conf->sh->peer[ad->counted].inflight,
                                    (ngx_atomic_int_t) -1);
        ad->counted = -1;
    }

    ngx_http_upstream_free_round_robin_peer(pc, &ad->rrp, state);
}


static ngx_int_t
ngx_http_srt_aff_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                   *p;
    ngx_http_srt_aff_data_t  *ad;

    ad = ngx_http_get_module_ctx(r, ngx_http_srt_upstream_module);

    if (ad == NULL || ad->why == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, 64);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%s %ui/%ui", ad->why, ad->matched, ad->ntokens)
             - p;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_load_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                   *p;
    srt_chan_stats            st;
    ngx_http_srt_loc_conf_t  *slcf;

    slcf = ngx_http_get_module_loc_conf(r, ngx_http_srt_module);

    if (slcf == NULL || slcf->model == NULL || slcf->model->chan == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    srt_chan_stats_get(slcf->model->chan, &st);

    p = ngx_pnalloc(r->pool, NGX_INT32_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%uD", st.slots_used) - p;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}
