/*
 * ngx_http_srt_module: directives, configuration and shared zones.
 *
 * Each srt_model gets a shared zone holding its channel (src/ipc) and one scheduler
 * process, started by the helper process that nginx spawns for our ngx_path_t manager.
 * Nothing here loads a model or touches a device: that happens only in the scheduler.
 */

#include "ngx_http_srt_module.h"

#include "hooks/registry.h"


typedef struct {
    ngx_int_t   min;
    ngx_int_t   max;
    const char *what;        /* "an integer between 1 and 1024" */
    ngx_str_t   word;        /* optional keyword accepted as `word_value` */
    ngx_int_t   word_value;
} ngx_http_srt_num_bounds_t;


static void *ngx_http_srt_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_srt_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_srt_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_srt_postconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_srt_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_srt_check_sock_dir(ngx_cycle_t *cycle,
    ngx_http_srt_main_conf_t *smcf);
static ngx_int_t ngx_http_srt_init_process(ngx_cycle_t *cycle);
static void ngx_http_srt_exit_process(ngx_cycle_t *cycle);
static void ngx_http_srt_exit_master(ngx_cycle_t *cycle);

static char *ngx_http_srt_model(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_set_spin(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_set_num(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_request_hooks(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_max_act_bytes(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_control_vector(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_set_handler(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_set_file(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_set_enum(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_set_fraction(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_set_chat_template(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_srt_set_hooks(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_srt_use_model(ngx_conf_t *cf,
    ngx_http_srt_loc_conf_t *conf);
static ngx_int_t ngx_http_srt_model_config(ngx_conf_t *cf,
    ngx_http_srt_loc_conf_t *conf, ngx_http_srt_model_t *m);
static ngx_int_t ngx_http_srt_check_hooks(ngx_conf_t *cf,
    ngx_http_srt_model_t *m);
static ngx_int_t ngx_http_srt_add_zone(ngx_conf_t *cf, ngx_http_srt_model_t *m);
static ngx_int_t ngx_http_srt_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);


static ngx_conf_enum_t  ngx_http_srt_devices[] = {
    { ngx_string("auto"), SRT_CHAN_DEVICE_AUTO },
    { ngx_string("cpu"), SRT_CHAN_DEVICE_CPU },
    { ngx_string("cuda"), SRT_CHAN_DEVICE_CUDA },
    { ngx_null_string, 0 }
};

static ngx_conf_enum_t  ngx_http_srt_policies[] = {
    { ngx_string("fcfs"), SRT_CHAN_POLICY_FCFS },
    { ngx_string("lpm"), SRT_CHAN_POLICY_LPM },
    { ngx_null_string, 0 }
};

static ngx_conf_enum_t  ngx_http_srt_tool_parsers[] = {
    { ngx_string("auto"), NGX_HTTP_SRT_TOOLS_AUTO },
    { ngx_string("hermes"), SRT_TOOLS_HERMES },
    { ngx_string("llama3"), SRT_TOOLS_LLAMA3 },
    { ngx_string("mistral"), SRT_TOOLS_MISTRAL },
    { ngx_string("deepseekv3"), SRT_TOOLS_DEEPSEEK_V3 },
    { ngx_string("pythonic"), SRT_TOOLS_PYTHONIC },
    { ngx_null_string, 0 }
};

static ngx_conf_enum_t  ngx_http_srt_reasoning_parsers[] = {
    { ngx_string("off"), SRT_REASONING_OFF },
    { ngx_string("qwen3"), SRT_REASONING_QWEN3 },
    { ngx_string("deepseek-r1"), SRT_REASONING_DEEPSEEK_R1 },
    { ngx_null_string, 0 }
};

static ngx_conf_enum_t  ngx_http_srt_numerics[] = {
    { ngx_string("exact"), SRT_CHAN_NUMERICS_EXACT },
    { ngx_string("fast"), SRT_CHAN_NUMERICS_FAST },
    { ngx_null_string, 0 }
};

static ngx_conf_enum_t  ngx_http_srt_kv_dtypes[] = {
    { ngx_string("auto"), SRT_CHAN_KV_AUTO },
    { ngx_string("f32"), SRT_CHAN_KV_F32 },
    { ngx_string("float32"), SRT_CHAN_KV_F32 },
    { ngx_string("f16"), SRT_CHAN_KV_F16 },
    { ngx_string("float16"), SRT_CHAN_KV_F16 },
    { ngx_string("bf16"), SRT_CHAN_KV_BF16 },
    { ngx_string("bfloat16"), SRT_CHAN_KV_BF16 },
    { ngx_null_string, 0 }
};

static ngx_http_srt_num_bounds_t  ngx_http_srt_threads_bounds = {
    1, 1024, "an integer between 1 and 1024 or \"auto\"",
    ngx_string("auto"), 0
};

static ngx_http_srt_num_bounds_t  ngx_http_srt_context_bounds = {
    16, 1048576, "an integer between 16 and 1048576", ngx_null_string, 0
};

static ngx_http_srt_num_bounds_t  ngx_http_srt_running_bounds = {
    1, 4096, "an integer between 1 and 4096", ngx_null_string, 0
};

static ngx_http_srt_num_bounds_t  ngx_http_srt_queued_bounds = {
    0, 65536, "an integer between 0 and 65536", ngx_null_string, 0
};

static ngx_http_srt_num_bounds_t  ngx_http_srt_total_tokens_bounds = {
    16, NGX_MAX_INT32_VALUE, "an integer of at least 16", ngx_null_string, 0
};

static ngx_http_srt_num_bounds_t  ngx_http_srt_chunked_bounds = {
    1, 1048576, "an integer between 1 and 1048576 or -1 (off)",
    ngx_string("-1"), -1
};

static ngx_http_srt_num_bounds_t  ngx_http_srt_tp_bounds = {
    1, 64, "an integer between 1 and 64", ngx_null_string, 0
};

static ngx_http_srt_num_bounds_t  ngx_http_srt_page_bounds = {
    1, 4096, "an integer between 1 and 4096", ngx_null_string, 0
};


static ngx_http_handler_pt  ngx_http_srt_admin_post =
    ngx_http_srt_admin_handler;
static ngx_http_handler_pt  ngx_http_srt_metrics_post =
    ngx_http_srt_metrics_handler;


static ngx_command_t  ngx_http_srt_commands[] = {

    { ngx_string("srt_model"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE12,
      ngx_http_srt_model,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("srt_forward_hooks"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_hooks,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, hooks),
      NULL },

    { ngx_string("srt_chat_template"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_chat_template,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, chat_template),
      NULL },

    { ngx_string("srt_device"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, device),
      &ngx_http_srt_devices },

    { ngx_string("srt_tool_call_parser"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, tool_parser),
      &ngx_http_srt_tool_parsers },

    { ngx_string("srt_reasoning_parser"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, reasoning_parser),
      &ngx_http_srt_reasoning_parsers },

    { ngx_string("srt_schedule_policy"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, schedule_policy),
      &ngx_http_srt_policies },

    { ngx_string("srt_numerics"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, numerics),
      &ngx_http_srt_numerics },

    { ngx_string("srt_kv_cache_dtype"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, kv_cache_dtype),
      &ngx_http_srt_kv_dtypes },

    { ngx_string("srt_threads"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_num,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, threads),
      &ngx_http_srt_threads_bounds },

    { ngx_string("srt_context_length"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_num,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, context_length),
      &ngx_http_srt_context_bounds },

    { ngx_string("srt_max_running_requests"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_num,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, max_running),
      &ngx_http_srt_running_bounds },

    { ngx_string("srt_max_queued_requests"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_num,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, max_queued),
      &ngx_http_srt_queued_bounds },

    { ngx_string("srt_max_total_tokens"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_num,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, max_total_tokens),
      &ngx_http_srt_total_tokens_bounds },

    { ngx_string("srt_mem_fraction_static"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_fraction,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("srt_chunked_prefill_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_num,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, chunked_prefill),
      &ngx_http_srt_chunked_bounds },

    { ngx_string("srt_tp_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_num,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, tp_size),
      &ngx_http_srt_tp_bounds },

    { ngx_string("srt_page_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_num,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, page_size),
      &ngx_http_srt_page_bounds },

    { ngx_string("srt_radix_cache"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, radix_cache),
      NULL },

    { ngx_string("srt_grammar_jump_forward"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, jump_forward),
      NULL },

    { ngx_string("srt_server_timing"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, server_timing),
      NULL },

    { ngx_string("srt_weights_mmap"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, weights_mmap),
      NULL },

    { ngx_string("srt_cuda_graph"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, cuda_graph),
      NULL },

    { ngx_string("srt_scheduler_spin"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_set_spin,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, sched_spin),
      NULL },

    { ngx_string("srt_wait_ready"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, wait_ready),
      NULL },

    { ngx_string("srt_admin_key"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, admin_key),
      NULL },

    { ngx_string("srt_watchdog_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, watchdog),
      NULL },

    { ngx_string("srt_queue_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, queue_timeout),
      NULL },

    { ngx_string("srt_request_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, request_timeout),
      NULL },

    { ngx_string("srt_temp_path"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_srt_main_conf_t, temp_path),
      NULL },

    { ngx_string("srt_hooks_path"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, hooks_search),
      NULL },

    { ngx_string("srt_control_vector"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_srt_control_vector,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("srt_request_hooks"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_srt_request_hooks,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("srt_max_activation_bytes"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_srt_max_act_bytes,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("srt_admin"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_srt_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_srt_admin_post },

    { ngx_string("srt_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_srt_set_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_srt_metrics_post },

    { ngx_string("srt_retry_after"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_srt_loc_conf_t, retry_after),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_srt_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_srt_postconfiguration,        /* postconfiguration */

    ngx_http_srt_create_main_conf,         /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_srt_create_loc_conf,          /* create location configuration */
    ngx_http_srt_merge_loc_conf            /* merge location configuration */
};


ngx_module_t  ngx_http_srt_module = {
    NGX_MODULE_V1,
    &ngx_http_srt_module_ctx,              /* module context */
    ngx_http_srt_commands,                 /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_srt_init_module,              /* init module */
    ngx_http_srt_init_process,             /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_srt_exit_process,             /* exit process */
    ngx_http_srt_exit_master,              /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_http_srt_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_srt_main_conf_t  *smcf;

    smcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_srt_main_conf_t));
    if (smcf == NULL) {
        return NULL;
    }

    /* engine messages (e.g. while checking a hook spec) go to nginx's log */
    srt_log_set_sink(ngx_http_srt_log_sink, NULL, SRT_LOG_INFO);

    if (ngx_array_init(&smcf->models, cf->pool, 2,
                       sizeof(ngx_http_srt_model_t *))
        != NGX_OK)
    {
        return NULL;
    }

    return smcf;
}


static void *
ngx_http_srt_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_srt_loc_conf_t  *slcf;

    slcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_srt_loc_conf_t));
    if (slcf == NULL) {
        return NULL;
    }

    slcf->device = NGX_CONF_UNSET;
    slcf->tool_parser = NGX_CONF_UNSET;
    slcf->reasoning_parser = NGX_CONF_UNSET;
    slcf->numerics = NGX_CONF_UNSET;
    slcf->kv_cache_dtype = NGX_CONF_UNSET;
    slcf->threads = NGX_CONF_UNSET;
    slcf->context_length = NGX_CONF_UNSET;
    slcf->max_running = NGX_CONF_UNSET;
    slcf->max_queued = NGX_CONF_UNSET;
    slcf->max_total_tokens = NGX_CONF_UNSET;
    slcf->chunked_prefill = NGX_CONF_UNSET;
    slcf->schedule_policy = NGX_CONF_UNSET;
    slcf->tp_size = NGX_CONF_UNSET;
    slcf->page_size = NGX_CONF_UNSET;
    slcf->radix_cache = NGX_CONF_UNSET;
    slcf->weights_mmap = NGX_CONF_UNSET;
    slcf->jump_forward = NGX_CONF_UNSET;
    slcf->server_timing = NGX_CONF_UNSET;
    slcf->cuda_graph = NGX_CONF_UNSET;
    slcf->sched_spin = NGX_CONF_UNSET;
    slcf->retry_after = NGX_CONF_UNSET_MSEC;
    slcf->wait_ready = NGX_CONF_UNSET_MSEC;
    slcf->request_hooks = NGX_CONF_UNSET_PTR;
    slcf->max_act_bytes = NGX_CONF_UNSET_SIZE;
    slcf->watchdog = NGX_CONF_UNSET_MSEC;
    slcf->queue_timeout = NGX_CONF_UNSET_MSEC;
    slcf->request_timeout = NGX_CONF_UNSET_MSEC;

    return slcf;
}


/* Every name srt_request_hooks lists must be a per-request hook of the model: a spec with
 * "per_request": true in its srt_forward_hooks file, or its srt_control_vector ... per_request. */
static char *
ngx_http_srt_check_request_hooks(ngx_conf_t *cf, ngx_http_srt_loc_conf_t *conf,
    const srt_chan_config *cfg)
{
    char        name[SRT_REQ_HOOK_NAME_MAX];
    ngx_str_t  *names;
    ngx_uint_t  i;
    int         rc;
    srt_err     err;

    if (conf->request_hooks == NULL) {
        return NGX_CONF_OK;
    }

    names = conf->request_hooks->elts;

    for (i = 0; i < conf->request_hooks->nelts; i++) {
        ngx_cpystrn((u_char *) name, names[i].data,
                    ngx_min(names[i].len + 1, sizeof(name)));

        if (cfg->cvec_path[0] && cfg->cvec_per_request
            && ngx_strcmp((cfg->cvec_name[0] ? cfg->cvec_name
                                             : "control_vector"), name) == 0)
        {
            continue;
        }

        rc = cfg->hooks_path[0]
             ? srt_hook_spec_file_has_per_request(cfg->hooks_path, name, &err)
             : 0;

        if (rc == 1) {
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"srt_request_hooks\": \"%s\" is not a per-request "
                           "hook of this model: no spec of that name with "
                           "\"per_request\": true in srt_forward_hooks, nor "
                           "srt_control_vector ... name=%s per_request%s%s",
                           name, name, rc == SRT_ERROR ? ": " : "",
                           rc == SRT_ERROR ? err.msg : "");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_srt_copy_cstr(char *dst, size_t cap, ngx_str_t *src)
{
    if (src->len >= cap) {
        return NGX_ERROR;
    }

    ngx_memcpy(dst, src->data, src->len);
    dst[src->len] = '\0';

    return NGX_OK;
}


static char *
ngx_http_srt_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_srt_loc_conf_t *prev = parent;
    ngx_http_srt_loc_conf_t *conf = child;

    ngx_conf_merge_str_value(conf->hooks, prev->hooks, "");
    ngx_conf_merge_str_value(conf->hooks_search, prev->hooks_search, "");
    ngx_conf_merge_ptr_value(conf->request_hooks, prev->request_hooks, NULL);
    ngx_conf_merge_size_value(conf->max_act_bytes, prev->max_act_bytes, 0);

    if (conf->cvec_path.data == NULL) {
        conf->cvec_path = prev->cvec_path;
        conf->cvec_name = prev->cvec_name;
        conf->cvec_scale = prev->cvec_scale;
        conf->cvec_start = prev->cvec_start;
        conf->cvec_end = prev->cvec_end;
        conf->cvec_per_request = prev->cvec_per_request;
    }
    ngx_conf_merge_str_value(conf->chat_template, prev->chat_template, "");
    ngx_conf_merge_value(conf->tool_parser, prev->tool_parser,
                         NGX_HTTP_SRT_TOOLS_AUTO);
    ngx_conf_merge_value(conf->reasoning_parser, prev->reasoning_parser,
                         SRT_REASONING_OFF);
    ngx_conf_merge_value(conf->device, prev->device, SRT_CHAN_DEVICE_AUTO);
    ngx_conf_merge_value(conf->numerics, prev->numerics,
                         SRT_CHAN_NUMERICS_EXACT);
    ngx_conf_merge_value(conf->kv_cache_dtype, prev->kv_cache_dtype,
                         SRT_CHAN_KV_AUTO);
    ngx_conf_merge_value(conf->threads, prev->threads, 0);
    ngx_conf_merge_value(conf->context_length, prev->context_length, 0);
    ngx_conf_merge_value(conf->max_running, prev->max_running, 0);
    ngx_conf_merge_value(conf->max_queued, prev->max_queued,
                         NGX_HTTP_SRT_DEFAULT_QUEUED);
    ngx_conf_merge_value(conf->max_total_tokens, prev->max_total_tokens, 0);
    ngx_conf_merge_value(conf->chunked_prefill, prev->chunked_prefill, 0);
    ngx_conf_merge_value(conf->schedule_policy, prev->schedule_policy,
                         SRT_CHAN_POLICY_FCFS);
    ngx_conf_merge_value(conf->tp_size, prev->tp_size, 1);
    ngx_conf_merge_value(conf->page_size, prev->page_size, 1);
    ngx_conf_merge_value(conf->radix_cache, prev->radix_cache, 1);
    ngx_conf_merge_value(conf->weights_mmap, prev->weights_mmap, 0);
    ngx_conf_merge_value(conf->jump_forward, prev->jump_forward, 0);
    ngx_conf_merge_value(conf->server_timing, prev->server_timing, 0);
    ngx_conf_merge_value(conf->cuda_graph, prev->cuda_graph, 1);
    ngx_conf_merge_value(conf->sched_spin, prev->sched_spin, 0);
    ngx_conf_merge_msec_value(conf->retry_after, prev->retry_after, 1000);
    ngx_conf_merge_msec_value(conf->wait_ready, prev->wait_ready, 0);
    /* SGLang's --watchdog-timeout default */
    ngx_conf_merge_msec_value(conf->watchdog, prev->watchdog, 300000);
    ngx_conf_merge_msec_value(conf->queue_timeout, prev->queue_timeout, 0);
    ngx_conf_merge_str_value(conf->admin_key, prev->admin_key, "");
    ngx_conf_merge_msec_value(conf->request_timeout, prev->request_timeout, 0);

    if (!conf->mem_fraction_set) {
        conf->mem_fraction = prev->mem_fraction;
        conf->mem_fraction_set = prev->mem_fraction_set;
    }

    if (conf->model_path.len == 0) {
        conf->max_body = prev->max_body;
        return NGX_CONF_OK;
    }

    return ngx_http_srt_use_model(cf, conf);
}


/*
 * A location that declares srt_model: its body limit, and the model it serves,
 * shared with every other location naming the same model.
 */
static char *
ngx_http_srt_use_model(ngx_conf_t *cf, ngx_http_srt_loc_conf_t *conf)
{
    ngx_uint_t                 i;
    ngx_http_srt_model_t      *m, **mp;
    ngx_http_srt_main_conf_t  *smcf;
    ngx_http_core_loc_conf_t  *clcf;

    /*
     * Answer "body too large" ourselves, in JSON: nginx's own check, which runs
     * before any handler and sends HTML, only catches bodies far over the limit.
     */
    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    conf->max_body = clcf->client_max_body_size;
    if (conf->max_body) {
        clcf->client_max_body_size = conf->max_body * 2 + 65536;
    }

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_srt_module);

    mp = smcf->models.elts;
    for (i = 0; i < smcf->models.nelts; i++) {
        if (mp[i]->name.len == conf->model_name.len
            && ngx_strncmp(mp[i]->name.data, conf->model_name.data,
                           conf->model_name.len) == 0)
        {
            if (mp[i]->path.len != conf->model_path.len
                || ngx_strncmp(mp[i]->path.data, conf->model_path.data,
                               conf->model_path.len) != 0)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "srt_model name \"%V\" is already used "
                                   "for \"%V\" in %V:%ui",
                                   &conf->model_name, &mp[i]->path,
                                   &mp[i]->conf_file, mp[i]->line);
                return NGX_CONF_ERROR;
            }

            /* the same model served at several locations: one scheduler,
             * whose slots' activation areas were sized by the first */
            if ((uint64_t) conf->max_act_bytes > mp[i]->cfg.act_bytes) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"srt_max_activation_bytes\" %uz is more "
                                   "than the %uL of the first location "
                                   "serving srt_model \"%V\" (%V:%ui), "
                                   "which sizes its slots",
                                   conf->max_act_bytes, mp[i]->cfg.act_bytes,
                                   &conf->model_name, &mp[i]->conf_file,
                                   mp[i]->line);
                return NGX_CONF_ERROR;
            }

            conf->model = mp[i];
            return ngx_http_srt_check_request_hooks(cf, conf, &mp[i]->cfg);
        }
    }

    m = ngx_pcalloc(cf->pool, sizeof(ngx_http_srt_model_t));
    if (m == NULL) {
        return NGX_CONF_ERROR;
    }

    m->path = conf->model_path;
    m->name = conf->model_name;
    m->conf_file = cf->conf_file->file.name;
    m->line = cf->conf_file->line;
    m->pid = NGX_INVALID_PID;

    if (ngx_http_srt_model_config(cf, conf, m) != NGX_OK
        || ngx_http_srt_check_hooks(cf, m) != NGX_OK
        || ngx_http_srt_add_zone(cf, m) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    mp = ngx_array_push(&smcf->models);
    if (mp == NULL) {
        return NGX_CONF_ERROR;
    }
    *mp = m;

    conf->model = m;

    return NGX_CONF_OK;
}


/* The channel configuration the scheduler reads: the location's merged values. */
static ngx_int_t
ngx_http_srt_model_config(ngx_conf_t *cf, ngx_http_srt_loc_conf_t *conf,
    ngx_http_srt_model_t *m)
{
    if (ngx_http_srt_copy_cstr(m->cfg.model_path, sizeof(m->cfg.model_path),
                               &m->path) != NGX_OK
        || ngx_http_srt_copy_cstr(m->cfg.served_name,
                                  sizeof(m->cfg.served_name), &m->name)
           != NGX_OK
        || ngx_http_srt_copy_cstr(m->cfg.hooks_path,
                                  sizeof(m->cfg.hooks_path), &conf->hooks)
           != NGX_OK
        || ngx_http_srt_copy_cstr(m->cfg.hooks_search,
                                  sizeof(m->cfg.hooks_search),
                                  &conf->hooks_search)
           != NGX_OK
        || ngx_http_srt_copy_cstr(m->cfg.chat_template,
                                  sizeof(m->cfg.chat_template),
                                  &conf->chat_template)
           != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "srt_model \"%V\": a path or name is too long",
                           &m->path);
        return NGX_ERROR;
    }

    if (conf->cvec_path.len) {
        srt_err  err;

        if (ngx_http_srt_copy_cstr(m->cfg.cvec_path, sizeof(m->cfg.cvec_path),
                                   &conf->cvec_path) != NGX_OK
            || ngx_http_srt_copy_cstr(m->cfg.cvec_name,
                                      sizeof(m->cfg.cvec_name),
                                      &conf->cvec_name) != NGX_OK)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"srt_control_vector\": path or name too long");
            return NGX_ERROR;
        }

        m->cfg.cvec_scale = conf->cvec_scale;
        m->cfg.cvec_layer_start = (int32_t) conf->cvec_start;
        m->cfg.cvec_layer_end = (int32_t) conf->cvec_end;
        m->cfg.cvec_per_request = (int32_t) conf->cvec_per_request;

        if (srt_hook_control_vector_check(m->cfg.cvec_path, &err) != SRT_OK) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"srt_control_vector\": %s", err.msg);
            return NGX_ERROR;
        }
    }

    if (ngx_http_srt_check_request_hooks(cf, conf, &m->cfg) != NGX_CONF_OK) {
        return NGX_ERROR;
    }

    m->cfg.act_bytes = (uint64_t) conf->max_act_bytes;
    m->cfg.device = (int32_t) conf->device;
    m->cfg.numerics = (int32_t) conf->numerics;
    m->cfg.kv_cache_dtype = (int32_t) conf->kv_cache_dtype;
    m->cfg.threads = (int32_t) conf->threads;
    m->cfg.context_length = (int32_t) conf->context_length;
    m->cfg.max_running_requests = (int32_t) conf->max_running;
    m->cfg.max_queued_requests = (int32_t) conf->max_queued;
    m->cfg.max_total_tokens = conf->max_total_tokens;
    m->cfg.mem_fraction_static = conf->mem_fraction_set ? conf->mem_fraction
                                                        : 0.0f;
    m->cfg.chunked_prefill_size = (int32_t) conf->chunked_prefill;
    m->cfg.schedule_policy = (int32_t) conf->schedule_policy;
    m->cfg.tp_size = (int32_t) conf->tp_size;
    m->cfg.radix_cache = (int32_t) conf->radix_cache;
    m->cfg.weights_mmap = (int32_t) conf->weights_mmap;
    m->cfg.grammar_jump_forward = (int32_t) conf->jump_forward;
    m->cfg.page_size = (int32_t) conf->page_size;
    m->cfg.sched_spin_us = (int32_t) conf->sched_spin;
    m->watchdog = conf->watchdog;
    m->cfg.cuda_graph = conf->cuda_graph ? 0 : -1;

    /* slots: what may run plus what may wait (0: nothing waits); each holds
     * a whole context */
    m->cfg.slots = (int32_t) ((conf->max_running ? conf->max_running
                                                 : NGX_HTTP_SRT_DEFAULT_RUNNING)
                              + conf->max_queued);
    m->cfg.slot_tokens = (int32_t) (conf->context_length
                                    ? conf->context_length
                                    : NGX_HTTP_SRT_DEFAULT_SLOT_TOKENS);

    return NGX_OK;
}


/*
 * Check every hook factory now, so that nginx -t and startup refuse a
 * broken spec file: the library is found and read (its exported symbols and
 * ABI value), never loaded, as the master usually runs as root; only the
 * scheduler process loads it and makes the hooks.
 */
static ngx_int_t
ngx_http_srt_check_hooks(ngx_conf_t *cf, ngx_http_srt_model_t *m)
{
    srt_err  err;

    if (m->cfg.hooks_path[0]) {
        if (srt_hook_spec_check_file(m->cfg.hooks_path,
                                     m->cfg.hooks_search[0]
                                     ? m->cfg.hooks_search : NULL, &err)
            != SRT_OK)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"srt_forward_hooks\": %s (srt_model \"%V\")",
                               err.msg, &m->path);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* The model's shared zone, which holds its channel (ngx_http_srt_init_zone). */
static ngx_int_t
ngx_http_srt_add_zone(ngx_conf_t *cf, ngx_http_srt_model_t *m)
{
    ngx_str_t  zname;

    m->chan_size = srt_chan_size(&m->cfg);
    if (m->chan_size == 0) {
        return NGX_ERROR;
    }

    zname.len = sizeof("srt_model_") - 1 + m->name.len;
    zname.data = ngx_pnalloc(cf->pool, zname.len);
    if (zname.data == NULL) {
        return NGX_ERROR;
    }
    ngx_sprintf(zname.data, "srt_model_%V", &m->name);

    /* room for the slab allocator's own pages beside the channel, and its
     * page descriptors (24 bytes per 4k page) */
    m->zone = ngx_shared_memory_add(cf, &zname,
                                    m->chan_size + m->chan_size / 128
                                    + 64 * ngx_pagesize,
                                    &ngx_http_srt_module);
    if (m->zone == NULL) {
        return NGX_ERROR;
    }

    if (m->zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "shared zone \"%V\" is already used", &zname);
        return NGX_ERROR;
    }

    m->zone->init = ngx_http_srt_init_zone;
    m->zone->data = m;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_srt_model_t *om = data;

    int                       rc;
    srt_err                   err;
    srt_chan                 *chan;
    ngx_slab_pool_t          *shpool;
    ngx_http_srt_model_t     *m;

    m = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (om) {
        /* reload: keep the channel, and requests in flight, if its geometry holds */
        chan = srt_chan_attach(om->chan_mem, om->chan_size, &err);
        if (chan != NULL) {
            /* the next scheduler reads the new settings */
            rc = srt_chan_reconfigure(chan, &m->cfg, &err);
            srt_chan_detach(chan);

            if (rc == SRT_OK) {
                m->chan_mem = om->chan_mem;
                return NGX_OK;
            }
        }
    }

    if (shm_zone->shm.exists) {
        m->chan_mem = shpool->data;
        return NGX_OK;
    }

    m->chan_mem = ngx_slab_alloc(shpool, m->chan_size);
    if (m->chan_mem == NULL) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "srt_model \"%V\": cannot allocate %uz bytes of "
                      "shared memory", &m->name, m->chan_size);
        return NGX_ERROR;
    }

    if (srt_chan_format(m->chan_mem, m->chan_size, &m->cfg, &err) != SRT_OK) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "srt_model \"%V\": %s", &m->name, err.msg);
        return NGX_ERROR;
    }

    shpool->data = m->chan_mem;

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_postconfiguration(ngx_conf_t *cf)
{
    ngx_http_srt_main_conf_t  *smcf;

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_srt_module);

    ngx_uint_t                 i;
    ngx_http_srt_model_t     **mp;

    if (smcf->models.nelts == 0) {
        return NGX_OK;
    }

    if (ngx_http_srt_process_init_path(cf, smcf) != NGX_OK) {
        return NGX_ERROR;
    }

    /* doorbells and locks live in srt_temp_path, a 0700 directory of the
     * workers' user: another local user cannot bind their names first */
    if (smcf->path->name.len >= SRT_CHAN_SOCK_DIR_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "srt_temp_path \"%V\" is too long for the "
                           "doorbell sockets in it (at most %d bytes)",
                           &smcf->path->name, SRT_CHAN_SOCK_DIR_MAX - 1);
        return NGX_ERROR;
    }

    mp = smcf->models.elts;

    for (i = 0; i < smcf->models.nelts; i++) {
        ngx_memcpy(mp[i]->cfg.sock_dir, smcf->path->name.data,
                   smcf->path->name.len);
        mp[i]->cfg.sock_dir[smcf->path->name.len] = '\0';
    }

    return NGX_OK;
}


static char *
ngx_http_srt_model(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_srt_loc_conf_t *slcf = conf;

    u_char                    *p, *last;
    ngx_str_t                 *value;
    ngx_file_info_t            fi;
    ngx_http_core_loc_conf_t  *clcf;

    if (slcf->model_path.len) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"srt_model\" needs a model path, not \"\"");
        return NGX_CONF_ERROR;
    }

    slcf->model_path = value[1];

    if (ngx_conf_full_name(cf->cycle, &slcf->model_path, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (ngx_file_info(slcf->model_path.data, &fi) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "srt_model \"%V\": cannot read the model",
                           &slcf->model_path);
        return NGX_CONF_ERROR;
    }

    if (!ngx_is_file(&fi) && !ngx_is_dir(&fi)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "srt_model \"%V\": not a file or a directory",
                           &slcf->model_path);
        return NGX_CONF_ERROR;
    }

    if (cf->args->nelts == 3) {
        if (value[2].len <= 5
            || ngx_strncmp(value[2].data, "name=", 5) != 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "srt_model: invalid parameter \"%V\", "
                               "expected \"name=...\"", &value[2]);
            return NGX_CONF_ERROR;
        }

        slcf->model_name.data = value[2].data + 5;
        slcf->model_name.len = value[2].len - 5;

        for (p = slcf->model_name.data;
             p < slcf->model_name.data + slcf->model_name.len;
             p++)
        {
            if (*p <= ' ' || *p == '"' || *p == '\\' || *p >= 0x7f) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "srt_model: invalid model name \"%V\"",
                                   &slcf->model_name);
                return NGX_CONF_ERROR;
            }
        }

        if (slcf->model_name.len >= SRT_CHAN_NAME_MAX - 16) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "srt_model: model name \"%V\" is too long",
                               &slcf->model_name);
            return NGX_CONF_ERROR;
        }

    } else {
        /* default name: the file or directory name without its extension */
        last = slcf->model_path.data + slcf->model_path.len;
        while (last > slcf->model_path.data && last[-1] == '/') {
            last--;
        }

        p = last;
        while (p > slcf->model_path.data && p[-1] != '/') {
            p--;
        }

        slcf->model_name.data = p;
        slcf->model_name.len = last - p;

        if (slcf->model_name.len > 5
            && ngx_strncasecmp(last - 5, (u_char *) ".gguf", 5) == 0)
        {
            slcf->model_name.len -= 5;
        }

        if (slcf->model_name.len >= SRT_CHAN_NAME_MAX - 16) {
            slcf->model_name.len = SRT_CHAN_NAME_MAX - 17;
        }
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_srt_handler;

    return NGX_CONF_OK;
}


/* srt_control_vector FILE [scale=S] [layers=A-B] [name=N] [per_request]:
 * llama.cpp's control-vector GGUF as a built-in hook (src/hooks/README.md). */
static char *
ngx_http_srt_control_vector(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_srt_loc_conf_t *slcf = conf;

    u_char     *dash;
    ngx_str_t  *value, v;
    ngx_int_t   a, b;
    ngx_uint_t  i;

    if (slcf->cvec_path.data) {
        return "is duplicate";
    }

    value = cf->args->elts;
    slcf->cvec_path = value[1];
    if (ngx_conf_full_name(cf->cycle, &slcf->cvec_path, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    slcf->cvec_scale = 1.0f;
    ngx_str_set(&slcf->cvec_name, "control_vector");

    for (i = 2; i < cf->args->nelts; i++) {
        if (ngx_strncmp(value[i].data, "scale=", 6) == 0) {
            char  *end;
            double d = strtod((char *) value[i].data + 6, &end);
            if (value[i].len == 6 || *end != '\0' || !(d > -1e6 && d < 1e6)) {
                goto invalid;
            }
            slcf->cvec_scale = (float) d;

        } else if (ngx_strncmp(value[i].data, "layers=", 7) == 0) {
            v.data = value[i].data + 7;
            v.len = value[i].len - 7;
            dash = ngx_strlchr(v.data, v.data + v.len, '-');
            if (dash == NULL) {
                goto invalid;
            }
            a = ngx_atoi(v.data, dash - v.data);
            b = ngx_atoi(dash + 1, v.data + v.len - dash - 1);
            if (a == NGX_ERROR || b == NGX_ERROR || a < 1 || b < a) {
                goto invalid;
            }
            slcf->cvec_start = a;
            slcf->cvec_end = b;

        } else if (ngx_strncmp(value[i].data, "name=", 5) == 0
                   && value[i].len > 5 && value[i].len - 5 < SRT_REQ_HOOK_NAME_MAX)
        {
            slcf->cvec_name.data = value[i].data + 5;
            slcf->cvec_name.len = value[i].len - 5;

        } else if (ngx_strcmp(value[i].data, "per_request") == 0) {
            slcf->cvec_per_request = 1;

        } else {
            goto invalid;
        }
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"srt_control_vector\": invalid parameter \"%V\" "
                       "(scale=S, layers=A-B with 1 <= A <= B, name=N, "
                       "per_request)", &value[i]);
    return NGX_CONF_ERROR;
}


/* srt_max_activation_bytes SIZE | off: "return_activations" allowed here, up to
 * SIZE bytes per request (all choices); each slot of the model gets an area of
 * SIZE in the shared zone (pages are touched only when used). */
static char *
ngx_http_srt_max_act_bytes(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_srt_loc_conf_t *slcf = conf;

    ssize_t     n;
    ngx_str_t  *value;

    if (slcf->max_act_bytes != NGX_CONF_UNSET_SIZE) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        slcf->max_act_bytes = 0;
        return NGX_CONF_OK;
    }

    n = ngx_parse_size(&value[1]);
    if (n <= 0 || (uint64_t) n > SRT_CHAN_ACT_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"srt_max_activation_bytes\" must be \"off\" or "
                           "a size from 1 to 1g, not \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    slcf->max_act_bytes = (size_t) n;

    return NGX_CONF_OK;
}


/* srt_request_hooks NAME ... | off: the per_request hook specs a request here may
 * select with "hooks" (nginx access control in front decides who gets here). */
static char *
ngx_http_srt_request_hooks(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_srt_loc_conf_t *slcf = conf;

    ngx_str_t   *value, *name;
    ngx_uint_t   i;

    if (slcf->request_hooks != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        slcf->request_hooks = NULL;
        return NGX_CONF_OK;
    }

    slcf->request_hooks = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                           sizeof(ngx_str_t));
    if (slcf->request_hooks == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {
        if (value[i].len == 0 || value[i].len >= SRT_REQ_HOOK_NAME_MAX) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"srt_request_hooks\": \"%V\" is not a hook "
                               "spec name (1 to %d bytes)", &value[i],
                               SRT_REQ_HOOK_NAME_MAX - 1);
            return NGX_CONF_ERROR;
        }

        name = ngx_array_push(slcf->request_hooks);
        if (name == NULL) {
            return NGX_CONF_ERROR;
        }

        *name = value[i];
    }

    return NGX_CONF_OK;
}


/* srt_admin, srt_metrics: "on" makes the location's content handler *cmd->post */

static char *
ngx_http_srt_set_handler(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t                 *value;
    ngx_http_handler_pt       *handler = cmd->post;
    ngx_http_core_loc_conf_t  *clcf;

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "on") == 0) {
        clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
        clcf->handler = *handler;
        return NGX_CONF_OK;
    }

    if (ngx_strcmp(value[1].data, "off") == 0) {
        return NGX_CONF_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%V\" must be \"on\" or \"off\", not \"%V\"",
                       &cmd->name, &value[1]);

    return NGX_CONF_ERROR;
}


static char *
ngx_http_srt_set_num(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_int_t                  n, *np;
    ngx_str_t                 *value;
    ngx_http_srt_num_bounds_t *b = cmd->post;

    np = (ngx_int_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (b->word.len && value[1].len == b->word.len
        && ngx_strncmp(value[1].data, b->word.data, b->word.len) == 0)
    {
        *np = b->word_value;
        return NGX_CONF_OK;
    }

    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR || n < b->min || n > b->max) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must be %s, not \"%V\"",
                           &cmd->name, b->what, &value[1]);
        return NGX_CONF_ERROR;
    }

    *np = n;

    return NGX_CONF_OK;
}


/* "off", "0", "200us", "2ms": how long the scheduler busy-waits for the next
 * request before it sleeps. */
static char *
ngx_http_srt_set_spin(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    size_t      len, unit;
    ngx_int_t   n, *np;
    ngx_str_t  *value;

    np = (ngx_int_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;
    len = value[1].len;

    if (len == 3 && ngx_strncmp(value[1].data, "off", 3) == 0) {
        *np = 0;
        return NGX_CONF_OK;
    }

    unit = 1;

    if (len > 2 && ngx_strncmp(value[1].data + len - 2, "us", 2) == 0) {
        len -= 2;

    } else if (len > 2 && ngx_strncmp(value[1].data + len - 2, "ms", 2) == 0) {
        len -= 2;
        unit = 1000;
    }

    n = ngx_atoi(value[1].data, len);

    if (n == NGX_ERROR || (n != 0 && len == value[1].len)
        || (ngx_uint_t) n * unit > 100000)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must be \"off\" or a time up to 100ms "
                           "with a unit (\"200us\", \"1ms\"), not \"%V\"",
                           &cmd->name, &value[1]);
        return NGX_CONF_ERROR;
    }

    *np = (ngx_int_t) (n * unit);

    return NGX_CONF_OK;
}


static char *
ngx_http_srt_set_enum(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    u_char           buf[256], *last;
    ngx_int_t       *np;
    ngx_str_t       *value;
    ngx_uint_t       i;
    ngx_conf_enum_t *e = cmd->post;

    np = (ngx_int_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 0; e[i].name.len; i++) {
        if (e[i].name.len == value[1].len
            && ngx_strcmp(e[i].name.data, value[1].data) == 0)
        {
            *np = e[i].value;
            return NGX_CONF_OK;
        }
    }

    last = buf;
    for (i = 0; e[i].name.len; i++) {
        last = ngx_slprintf(last, buf + sizeof(buf), "%s\"%V\"",
                            i ? (e[i + 1].name.len ? ", " : " or ") : "",
                            &e[i].name);
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%V\" must be %*s, not \"%V\"",
                       &cmd->name, last - buf, buf, &value[1]);

    return NGX_CONF_ERROR;
}


static char *
ngx_http_srt_set_fraction(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_srt_loc_conf_t *slcf = conf;

    char        buf[64], *end;
    double      v;
    ngx_str_t  *value;

    if (slcf->mem_fraction_set) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0 || value[1].len >= sizeof(buf)) {
        goto invalid;
    }

    ngx_memcpy(buf, value[1].data, value[1].len);
    buf[value[1].len] = '\0';

    v = strtod(buf, &end);

    if (*end != '\0' || !(v > 0.0 && v < 1.0)) {
        goto invalid;
    }

    slcf->mem_fraction = (float) v;
    slcf->mem_fraction_set = 1;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%V\" must be a number between 0 and 1 "
                       "(exclusive), not \"%V\"", &cmd->name, &value[1]);

    return NGX_CONF_ERROR;
}


static char *
ngx_http_srt_set_file(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t        *field, *value;
    ngx_file_info_t   fi;

    field = (ngx_str_t *) (p + cmd->offset);

    if (field->data) {
        return "is duplicate";
    }

    value = cf->args->elts;
    *field = value[1];

    if (field->len == 0
        || ngx_conf_full_name(cf->cycle, field, 1) != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" needs a file, not \"%V\"",
                           &cmd->name, &value[1]);
        return NGX_CONF_ERROR;
    }

    if (ngx_file_info(field->data, &fi) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "\"%V\": cannot read \"%V\"", &cmd->name, field);
        return NGX_CONF_ERROR;
    }

    if (!ngx_is_file(&fi)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\": \"%V\" is not a file", &cmd->name, field);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_srt_set_chat_template(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char  *p = conf;

    char               *rv, *src;
    size_t              len;
    srt_err             err;
    ngx_str_t          *field;
    srt_chat_template  *t;

    rv = ngx_http_srt_set_file(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    field = (ngx_str_t *) (p + cmd->offset);

    /* compile it now, so that nginx -t reports a template the engine cannot run */

    if (srt_chat_template_read_file((char *) field->data, &src, &len, &err)
        != SRT_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\" \"%V\": %s",
                           &cmd->name, field, err.msg);
        return NGX_CONF_ERROR;
    }

    if (srt_chat_template_compile(src, len, &t, &err) != SRT_OK) {
        free(src);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\" \"%V\": %s",
                           &cmd->name, field, err.msg);
        return NGX_CONF_ERROR;
    }

    srt_chat_template_free(t);
    free(src);

    return NGX_CONF_OK;
}


/* The spec file's path, made absolute; it is checked (parsed, every factory
 * resolved) where a model takes it, with the srt_hooks_path in effect there. */

static char *
ngx_http_srt_set_hooks(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    char        *rv;
    ngx_str_t   *field;

    rv = ngx_http_srt_set_file(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    field = (ngx_str_t *) (p + cmd->offset);

    if (access((char *) field->data, R_OK) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "\"%V\": cannot read \"%V\"", &cmd->name, field);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * nginx created srt_temp_path (0700, owned by the workers' user when the
 * master runs as root), but leaves the mode of one that already existed.
 */

static ngx_int_t
ngx_http_srt_check_sock_dir(ngx_cycle_t *cycle, ngx_http_srt_main_conf_t *smcf)
{
    ngx_file_info_t  fi;

    if (ngx_test_config) {
        return NGX_OK;
    }

    if (lstat((char *) smcf->path->name.data, &fi) == -1) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, ngx_errno,
                      "srt_temp_path \"%V\"", &smcf->path->name);
        return NGX_ERROR;
    }

    if (!S_ISDIR(fi.st_mode)) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "srt_temp_path \"%V\" is not a directory",
                      &smcf->path->name);
        return NGX_ERROR;
    }

    if ((fi.st_mode & 077)
        && chmod((char *) smcf->path->name.data, fi.st_mode & 0700) == -1)
    {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, ngx_errno,
                      "srt_temp_path \"%V\" must be mode 0700 (the doorbell "
                      "sockets in it are the workers' own)",
                      &smcf->path->name);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * In the master, once this configuration can no longer fail to load: it takes
 * every model's channel. A scheduler stopping gracefully learns from the
 * generation whether a newer configuration will serve its channel (reload)
 * or none will (quit, or a reload that gave the model a new channel).
 */

static ngx_int_t
ngx_http_srt_init_module(ngx_cycle_t *cycle)
{
    srt_err                     err;
    srt_chan                   *chan;
    ngx_uint_t                  i;
    ngx_http_srt_model_t      **mp;
    ngx_http_srt_main_conf_t   *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_srt_module);
    if (smcf == NULL || smcf->models.nelts == 0) {
        return NGX_OK;
    }

    if (ngx_http_srt_check_sock_dir(cycle, smcf) != NGX_OK) {
        return NGX_ERROR;
    }

    /* what an nginx killed with -9 left in srt_temp_path: files no live
     * process holds (3 a start, and a worker's doorbell) */
    if (!ngx_test_config) {
        srt_chan_sock_dir_sweep((char *) smcf->path->name.data, 0);
    }

    mp = smcf->models.elts;

    for (i = 0; i < smcf->models.nelts; i++) {
        chan = srt_chan_attach(mp[i]->chan_mem, mp[i]->chan_size, &err);
        if (chan == NULL) {
            continue;
        }

        mp[i]->chan_gen = srt_chan_adopt(chan);
        srt_chan_detach(chan);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_srt_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                 i;
    ngx_http_srt_model_t     **mp;
    ngx_http_srt_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_srt_module);
    if (smcf == NULL || smcf->models.nelts == 0) {
        return NGX_OK;
    }

    mp = smcf->models.elts;

    for (i = 0; i < smcf->models.nelts; i++) {
        srt_err  err;

        if (mp[i]->chan_mem == NULL) {
            continue;
        }

        mp[i]->chan = srt_chan_attach(mp[i]->chan_mem, mp[i]->chan_size, &err);
        if (mp[i]->chan == NULL) {
            ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                          "srt_model \"%V\": %s", &mp[i]->name, err.msg);
            continue;
        }

        if (ngx_process == NGX_PROCESS_WORKER
            || ngx_process == NGX_PROCESS_SINGLE)
        {
            if (ngx_http_srt_worker_init(cycle, mp[i]) != NGX_OK) {
                return NGX_ERROR;
            }
        }
    }

    if (ngx_process == NGX_PROCESS_SINGLE) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "srt: \"master_process off\" runs no scheduler process; "
                      "model requests get 503 (enable master_process)");
    }

    return NGX_OK;
}


/*
 * The workers are reaped and no scheduler will be spawned again: this master's
 * channels' doorbells and locks, and its schedulers' key locks, are nobody's
 * (a scheduler still exiting keeps what it has open), and stale files go too.
 */
static void
ngx_http_srt_exit_master(ngx_cycle_t *cycle)
{
    srt_err                     err;
    srt_chan                   *chan;
    ngx_uint_t                  i;
    ngx_http_srt_model_t      **mp;
    ngx_http_srt_main_conf_t   *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_srt_module);
    if (smcf == NULL || smcf->models.nelts == 0 || smcf->path == NULL) {
        return;
    }

    mp = smcf->models.elts;

    for (i = 0; i < smcf->models.nelts; i++) {
        chan = srt_chan_attach(mp[i]->chan_mem, mp[i]->chan_size, &err);
        if (chan == NULL) {
            continue;
        }

        srt_chan_sock_dir_forget((char *) smcf->path->name.data,
                                 srt_chan_id(chan), (int) ngx_pid);
        srt_chan_detach(chan);
    }

    srt_chan_sock_dir_sweep((char *) smcf->path->name.data, 0);
}


static void
ngx_http_srt_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                 i;
    ngx_http_srt_model_t     **mp;
    ngx_http_srt_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_srt_module);
    if (smcf == NULL) {
        return;
    }

    mp = smcf->models.elts;

    for (i = 0; i < smcf->models.nelts; i++) {
        if (mp[i]->tmpl) {
            srt_chat_template_free(mp[i]->tmpl);
            mp[i]->tmpl = NULL;
        }

        if (mp[i]->tok) {
            srt_tokenizer_free(mp[i]->tok);
            mp[i]->tok = NULL;
        }

        free(mp[i]->bos_token);
        free(mp[i]->eos_token);
        mp[i]->bos_token = NULL;
        mp[i]->eos_token = NULL;

        /*
         * A worker's doorbell is a socket file in srt_temp_path, named after
         * its pid: the detach removes it, else one per model and worker stayed
         * there with every reload. Its fd goes too: the event loop is over.
         */
        if (ngx_process == NGX_PROCESS_WORKER && mp[i]->chan != NULL) {
            srt_chan_detach(mp[i]->chan);
            mp[i]->chan = NULL;
        }
    }
}
