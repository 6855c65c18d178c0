/* The scheduler process: the scheduler core (srt/sched.h) over the loaded model and the
 * shared-memory channel (ipc/channel.h). The nginx helper process (src/ngx) calls
 * srt_sched_run(); tests and srt-bench-sched use the model runner directly.
 *
 * This is the one place where the channel and the scheduler meet, so the scheduler's public
 * header stays free of the channel. */
#ifndef SRT_SCHED_SERVE_H
#define SRT_SCHED_SERVE_H

#include <stdint.h>

#include "ipc/channel.h"
#include "srt/common.h"
#include "srt/sched.h"

/* ---- the real model as a runner ---- */
struct srt_model;
struct srt_model_config;
typedef struct srt_sched_model_runner srt_sched_model_runner;

/* A runner over the loaded model with its own KV pool of cfg->max_total_tokens slots. precise:
 * f32 activations (srt_numerics exact), else 8-bit (fast); kv_dtype: 0 f32 slots, else 1 + the
 * pool's srt_dtype (srt_kv_cache_dtype). */
int  srt_sched_model_runner_create(struct srt_model *m, const srt_sched_config *cfg, int n_threads, int precise,
                                   int kv_dtype, srt_sched_model_runner **out, srt_err *err);
srt_sched_runner srt_sched_model_runner_iface(srt_sched_model_runner *mr);   /* sample: built-in */
void srt_sched_model_runner_free(srt_sched_model_runner *mr);

/* Scheduler settings from the directives (channel config) and the model: context length,
 * limits, chunked prefill (0 = unset: 2048; -1 = off, as SGLang's -1), KV budget (srt_max_total_tokens, else srt_mem_fraction_static of device_bytes
 * after the weights, capped at max_running x context), EOS ids. */
int srt_sched_config_from_chan(const srt_chan_config *cc, const struct srt_model_config *mc,
                               uint64_t device_bytes, srt_sched_config *out, srt_err *err);

/* Where srt_sched_run() publishes its metrics: called in the scheduler process at most every
 * 50 ms while busy, after every step that finishes a request, and once before it blocks
 * idle. The host (the nginx scheduler process) copies the struct into memory its workers
 * read (srt_chan_sched_publish_metrics); a worker renders it with
 * srt_sched_metrics_prometheus() when /metrics is read. */
typedef void (*srt_sched_metrics_sink)(const srt_sched_metrics *m, void *user);

/* The scheduler process: loads the model named in the channel's config, publishes
 * LOADING then READY (or FAILED), serves requests until srt_chan_sched_stopping(), and
 * returns SRT_OK. The caller has done srt_chan_sched_open(). sink (NULL: none) receives
 * the metrics with sink_user. */
int srt_sched_run(srt_chan *c, srt_sched_metrics_sink sink, void *sink_user, srt_err *err);

#endif
