/*
 * ngx_http_srt_module: shared declarations of the nginx side.
 *
 *   ngx_http_srt_module.c    directives, configuration, shared zones, init_process
 *   ngx_http_srt_process.c   the scheduler processes: spawn, supervise, backoff, hand-over
 *   ngx_http_srt_handler.c   endpoints, request life cycle, doorbell, client disconnect
 *   ngx_http_srt_request.c   body -> validated request -> prompt token ids
 *   ngx_http_srt_response.c  token ids -> detokenized text, stop strings -> JSON or SSE
 *   ngx_http_srt_admin.c     srt_admin: hook registry commands through the channel
 */

#ifndef _NGX_HTTP_SRT_MODULE_H_INCLUDED_
#define _NGX_HTTP_SRT_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <yajl/yajl_tree.h>
#include <yajl/yajl_gen.h>

#include "ipc/channel.h"
#include "srt/grammar.h"
#include "srt/tokenizer.h"
#include "srt/chat_template.h"
#include "srt/frontend.h"
#include "srt/output_parse.h"

/* Nothing of this module is anyone else's API: nginx finds it through ngx_modules (generated,
 * default visibility) and loads it RTLD_GLOBAL, so what is declared from here on stays in
 * the .so. After the nginx and yajl headers: their functions live in other objects. */
#pragma GCC visibility push(hidden)


#define NGX_HTTP_SRT_MAX_N          16
#define NGX_HTTP_SRT_MAX_STOP       16
#define NGX_HTTP_SRT_DEFAULT_SLOT_TOKENS  8192
#define NGX_HTTP_SRT_DEFAULT_RUNNING      64
#define NGX_HTTP_SRT_DEFAULT_QUEUED       256
#define NGX_HTTP_SRT_TOOLS_AUTO           (-2)  /* srt_tool_call_parser auto */


typedef struct ngx_http_srt_model_s  ngx_http_srt_model_t;
typedef struct ngx_http_srt_parse_s  ngx_http_srt_parse_t;


struct ngx_http_srt_model_s {
    ngx_str_t                  path;        /* srt_model PATH (absolute) */
    ngx_str_t                  name;        /* served model name */
    ngx_str_t                  conf_file;
    ngx_uint_t                 line;

    srt_chan_config            cfg;
    ngx_shm_zone_t            *zone;
    size_t                     chan_size;

    /* per process */
    void                      *chan_mem;
    srt_chan                  *chan;
    uint32_t                   chan_gen;    /* srt_chan_adopt() by this cycle */
    ngx_msec_t                 watchdog;    /* srt_watchdog_timeout */

    /* worker */
    srt_tokenizer             *tok;
    srt_chat_template         *tmpl;
    char                      *bos_token;
    char                      *eos_token;
    srt_tool_format            tool_format; /* the template's, for auto */
    ngx_str_t                  load_error;  /* why the tokenizer/template failed */
    ngx_queue_t                waiting;     /* ngx_http_srt_ctx_t with slots */
    ngx_queue_t                parked;      /* waiting for the model to be ready */
    ngx_connection_t          *bell;

    /* supervisor (helper process) */
    ngx_pid_t                  pid;
    ngx_connection_t          *lifeline;
    ngx_event_t                respawn;
    ngx_event_t                watch;       /* srt_watchdog_timeout */
    ngx_msec_t                 backoff;
    time_t                     started;
    ngx_uint_t                 crashes;
};


typedef struct {
    ngx_array_t                models;      /* ngx_http_srt_model_t * */
    ngx_path_t                *path;        /* the helper-process trick */
    ngx_str_t                  temp_path;   /* srt_temp_path: the directory it names */
    ngx_flag_t                 supervised;  /* helper started */
} ngx_http_srt_main_conf_t;


typedef struct {
    ngx_http_srt_model_t      *model;

    ngx_str_t                  model_path;  /* set where srt_model appears */
    ngx_str_t                  model_name;
    ngx_str_t                  hooks;
    ngx_str_t                  hooks_search; /* srt_hooks_path */
    ngx_array_t               *request_hooks; /* srt_request_hooks: ngx_str_t, NULL = off */
    ngx_str_t                  cvec_path;   /* srt_control_vector FILE ... */
    ngx_str_t                  cvec_name;
    float                      cvec_scale;
    ngx_int_t                  cvec_start;
    ngx_int_t                  cvec_end;
    ngx_flag_t                 cvec_per_request;
    size_t                     max_act_bytes; /* srt_max_activation_bytes, 0 = off */
    ngx_str_t                  chat_template;
    ngx_int_t                  tool_parser;  /* srt_tool_call_parser */
    ngx_int_t                  reasoning_parser; /* srt_reasoning_parser */
    ngx_int_t                  device;
    ngx_int_t                  numerics;
    ngx_int_t                  kv_cache_dtype;
    ngx_int_t                  threads;
    ngx_int_t                  context_length;
    ngx_int_t                  max_running;
    ngx_int_t                  max_queued;
    ngx_int_t                  max_total_tokens;
    ngx_int_t                  chunked_prefill;
    ngx_int_t                  schedule_policy;
    ngx_int_t                  tp_size;
    ngx_int_t                  page_size;
    ngx_flag_t                 radix_cache;
    ngx_flag_t                 weights_mmap;
    ngx_flag_t                 jump_forward; /* srt_grammar_jump_forward */
    ngx_flag_t                 server_timing;
    ngx_flag_t                 cuda_graph;
    ngx_int_t                  sched_spin;  /* srt_scheduler_spin, microseconds */
    float                      mem_fraction;
    ngx_uint_t                 mem_fraction_set;
    ngx_msec_t                 retry_after;
    ngx_msec_t                 wait_ready;
    ngx_msec_t                 watchdog;    /* srt_watchdog_timeout */
    ngx_str_t                  admin_key;   /* srt_admin_key */
    ngx_msec_t                 queue_timeout;   /* srt_queue_timeout, 0 = none */
    ngx_msec_t                 request_timeout; /* srt_request_timeout, 0 = none */
    off_t                      max_body;    /* client_max_body_size, answered in JSON */
} ngx_http_srt_loc_conf_t;


typedef enum {
    NGX_HTTP_SRT_EP_CHAT = 0,
    NGX_HTTP_SRT_EP_COMPLETIONS,
    NGX_HTTP_SRT_EP_MODELS,
    NGX_HTTP_SRT_EP_HEALTH,
    NGX_HTTP_SRT_EP_MODEL_INFO,
    NGX_HTTP_SRT_EP_UNKNOWN
} ngx_http_srt_endpoint_e;


/* A validated request, built from the body. */
typedef struct {
    ngx_http_srt_endpoint_e    endpoint;
    srt_request                rq;          /* what the scheduler gets (srt/request.h) */
    ngx_uint_t                 n;
    ngx_flag_t                 stream;
    ngx_flag_t                 include_usage;
    ngx_flag_t                 logprobs;
    ngx_flag_t                 max_tokens_set;
    ngx_flag_t                 tools;       /* parse tool calls into tool_calls */
    ngx_flag_t                 one_call;    /* parallel_tool_calls: false */
    srt_tool_format            tool_format; /* their format, when tools */
    srt_reasoning_format       reasoning;   /* srt_reasoning_parser (chat) */
    ngx_flag_t                 think_open;  /* the prompt ends inside <think> */
    ngx_flag_t                 hold_reasoning; /* stream_reasoning: false */
    ngx_uint_t                 n_stop;
    ngx_str_t                  stop[NGX_HTTP_SRT_MAX_STOP];
    size_t                     max_stop_len;
    ngx_str_t                  model;
    int32_t                   *prompt;
    size_t                     n_prompt;
} ngx_http_srt_params_t;


/* One choice (n > 1 gives several), i.e. one channel slot. */
typedef struct {
    uint32_t                   slot;
    uint32_t                   gen;
    ngx_flag_t                 live;        /* slot held */
    ngx_flag_t                 done;
    uint32_t                   consumed;    /* tokens taken from the slot */
    uint32_t                   n_tokens;    /* completion tokens counted */
    uint32_t                   cached;
    const char                *finish;      /* "stop", "length", NULL */
    srt_detok                  detok;
    u_char                    *text;        /* decoded, not yet emitted */
    size_t                     text_len;
    size_t                     text_cap;
    size_t                     emitted;     /* bytes of text already sent (streaming) */
    ngx_array_t               *lp;          /* ngx_http_srt_logprob_t */
    ngx_uint_t                 lp_emitted;
    ngx_flag_t                 role_sent;
    struct ngx_http_srt_parsed_s  *parsed;  /* reasoning/content/calls split */
    srt_outparse              *watch;       /* one_call: where call 1 ends */
    ngx_flag_t                 error;
    u_char                    *act;         /* returned activations: records */
    size_t                     act_len;     /* (srt_act_record + data), copied */
    ngx_uint_t                 timed_out;   /* 0, or 503 (queue) / 504 (total) */
    const char                *errmsg;
    uint64_t                   t_submit_ns; /* srt_chan_output stamps, and when */
    uint64_t                   t_pop_ns;    /* this worker saw the finish */
    uint64_t                   t_done_ns;
    uint64_t                   t_seen_ns;
} ngx_http_srt_choice_t;


typedef struct {
    int32_t                    id;
    float                      logprob;
    size_t                     offset;      /* in the choice's text */
    uint32_t                   n_top;
    int32_t                    top_ids[SRT_REQ_MAX_TOP_LOGPROBS];
    float                      top_lps[SRT_REQ_MAX_TOP_LOGPROBS];
} ngx_http_srt_logprob_t;


typedef struct {
    ngx_http_request_t        *request;
    ngx_http_srt_model_t      *model;
    ngx_http_srt_params_t      p;
    ngx_queue_t                queue;
    ngx_flag_t                 queued;
    ngx_flag_t                 parked;
    ngx_msec_t                 park_deadline;
    ngx_event_t                timer;
    ngx_uint_t                 n_choices;
    ngx_http_srt_choice_t     *choices;     /* p.n of them, once the body parsed */
    ngx_flag_t                 header_sent;
    ngx_flag_t                 finished;
    ngx_flag_t                 aborted;
    ngx_flag_t                 retried;     /* resubmitted once after a scheduler died */
    ngx_flag_t                 parsed;      /* ctx->p holds the request: never parsed twice */
    ngx_http_srt_parse_t      *parse;       /* parked: the body as parsed so far */
    ngx_uint_t                 prompt_tokens;
    uint64_t                   t_body_ns;   /* body read: parsing starts */
    u_char                     id[40];      /* "chatcmpl-..." */
    time_t                     created;
    ngx_uint_t                 context_length;
    char                      *detok_buf;   /* srt_detok_max_out() bytes */
    size_t                     detok_cap;
    ngx_chain_t               *free;        /* SSE buffers to reuse */
    ngx_chain_t               *busy;
} ngx_http_srt_ctx_t;


extern ngx_module_t  ngx_http_srt_module;


/* ngx_http_srt_process.c */
void ngx_http_srt_log_sink(srt_log_level level, const char *msg, void *user);
ngx_int_t ngx_http_srt_process_init_path(ngx_conf_t *cf,
    ngx_http_srt_main_conf_t *smcf);

/* ngx_http_srt_handler.c */
ngx_int_t ngx_http_srt_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_srt_metrics_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_srt_worker_init(ngx_cycle_t *cycle,
    ngx_http_srt_model_t *m);
ngx_msec_t ngx_http_srt_sched_stale(ngx_http_srt_model_t *m);
ngx_int_t ngx_http_srt_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *param, const char *code, const char *fmt, ...);
ngx_int_t ngx_http_srt_retry(ngx_http_srt_ctx_t *ctx);
u_char *ngx_http_srt_body(ngx_http_request_t *r, size_t max, size_t *len);

/* ngx_http_srt_admin.c */
ngx_int_t ngx_http_srt_admin_handler(ngx_http_request_t *r);
void ngx_http_srt_admin_wake(ngx_http_srt_model_t *m);

/* ngx_http_srt_request.c */
ngx_int_t ngx_http_srt_parse_request(ngx_http_request_t *r,
    ngx_http_srt_model_t *m, u_char *body, size_t len,
    ngx_http_srt_params_t *p, ngx_http_srt_parse_t **parked,
    ngx_uint_t *status, const char **param, char *errbuf, size_t errlen);
yajl_val ngx_http_srt_member(yajl_val obj, const char *key);

/* ngx_http_srt_response.c */
#define NGX_HTTP_SRT_WAIT  NGX_BUSY   /* pump: still generating */

ngx_int_t ngx_http_srt_pump(ngx_http_srt_ctx_t *ctx);
ngx_int_t ngx_http_srt_send_json(ngx_http_request_t *r, ngx_uint_t status,
    yajl_gen g);
ngx_table_elt_t *ngx_http_srt_add_header(ngx_http_request_t *r, char *key,
    char *value);
void ngx_http_srt_gen_str(yajl_gen g, const char *s);
yajl_gen_status ngx_http_srt_gen_val(yajl_gen g, yajl_val v);
void ngx_http_srt_gen_ngx_str(yajl_gen g, ngx_str_t *s);
void ngx_http_srt_gen_num(yajl_gen g, double v);
void ngx_http_srt_gen_int(yajl_gen g, long long v);


#pragma GCC visibility pop

#endif /* _NGX_HTTP_SRT_MODULE_H_INCLUDED_ */
