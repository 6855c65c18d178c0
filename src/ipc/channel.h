/* The shared-memory channel between nginx workers and one model's scheduler process.
 *
 * One channel per srt_model. It lives in one shared mapping (an nginx shared zone, or any
 * MAP_SHARED memory in tests) and holds only offsets, so both sides may map it anywhere.
 *
 *   header      config the scheduler needs (directive values), scheduler state, counters
 *   slots[n]    one per in-flight request: a lock-free state word, a generation counter,
 *               the owner worker's pid, the request (srt_request: sampling parameters and
 *               whatever srt/request.h adds), and a slot-owned token area
 *               (prompt ids, then generated ids + logprobs, then a small top-logprob ring,
 *               then an activation area of cfg.act_bytes, 0 unless srt_max_activation_bytes)
 *
 * Life of a slot (every transition is one CAS on the state word):
 *
 *   FREE --worker claim--> WRITING --worker submit--> QUEUED --scheduler pop--> RUNNING
 *   RUNNING --scheduler finish--> DONE --worker release--> FREE (generation + 1)
 *
 * The ABORTED flag is set by the worker when its client has gone; the scheduler sees it through
 * srt_chan_sched_is_aborted(), drops the request and calls srt_chan_sched_finish(); whichever of
 * the two comes second frees the slot, so an abandoned slot never leaks. Slots carry the owner
 * pid: when a worker dies the scheduler reclaims its slots (srt_chan_sched_reclaim, also run from
 * srt_chan_sched_wait); when the scheduler dies its supervisor fails the in-flight slots
 * (srt_chan_sched_crashed). No lock is ever held across processes, so a crash on either side
 * loses no other request's slot.
 *
 * Submission order: a worker stamps each slot with a ticket from a shared counter; the
 * scheduler pops QUEUED slots in ticket order (FIFO). There is no shared ring that a producer
 * dying half-way could wedge.
 *
 * Wake-ups (doorbells) are unix datagram sockets, files in the channel's sock_dir (a 0700
 * directory: no other local user can bind a name first) named after the channel id and the
 * receiving process's pid, so they are per process (an old and a new worker never share one
 * across a reload) and need no fd inheritance. "One scheduler per channel" and "one per model
 * key" are flock()s on files there, which the kernel drops when their process dies. Workers
 * register their socket in the nginx event loop; nobody sleeps or polls.
 *
 * Thread safety: a srt_chan handle belongs to one thread; the shared memory is safe for any
 * number of worker processes and one scheduler.
 *
 * The implementation is one file per job (slots, doorbells, owner lock, metrics, admin
 * mailbox); channel_internal.h, private to src/ipc, holds the layout and names the files.
 */
#ifndef SRT_IPC_CHANNEL_H
#define SRT_IPC_CHANNEL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "srt/common.h"
#include "srt/request.h"   /* srt_request (embedded in each slot), srt_finish_reason */

#define SRT_CHAN_TOP_RING          64   /* rows of top-logprobs kept per slot (worker drains) */
#define SRT_CHAN_PATH_MAX          1024
#define SRT_CHAN_SOCK_DIR_MAX      72     /* + "/<16 hex>-w<pid>" fits sun_path (108) */
#define SRT_CHAN_NAME_MAX          128
#define SRT_CHAN_MAX_WORKERS       128  /* worker doorbells rung on scheduler state changes */
#define SRT_CHAN_METRICS_MAX       32768 /* metrics published by the scheduler */
#define SRT_CHAN_ADMIN_REQ_MAX     1024  /* one admin command (srt_admin) */
#define SRT_CHAN_ADMIN_RESP_MAX    65536 /* its JSON answer */
#define SRT_CHAN_ACT_MAX           (1ull << 30) /* srt_max_activation_bytes: a slot's area */

/* ---- configuration: directive values, written by nginx, read by the scheduler ---- */

typedef enum srt_chan_device {
    SRT_CHAN_DEVICE_AUTO = 0,
    SRT_CHAN_DEVICE_CPU  = 1,
    SRT_CHAN_DEVICE_CUDA = 2,
} srt_chan_device;

typedef enum srt_chan_policy {
    SRT_CHAN_POLICY_FCFS = 0,
    SRT_CHAN_POLICY_LPM  = 1,
} srt_chan_policy;

typedef enum srt_chan_numerics {
    SRT_CHAN_NUMERICS_EXACT = 0,   /* f32 activations: HF's greedy tokens */
    SRT_CHAN_NUMERICS_FAST  = 1,   /* 8-bit activations on quantized weights (llama.cpp's scheme) */
} srt_chan_numerics;

typedef enum srt_chan_kv_dtype {
    SRT_CHAN_KV_AUTO = 0,          /* f16 on the CPU, bf16 on CUDA */
    SRT_CHAN_KV_F32  = 1,
    SRT_CHAN_KV_F16  = 2,
    SRT_CHAN_KV_BF16 = 3,
} srt_chan_kv_dtype;

typedef struct srt_chan_config {
    char     model_path[SRT_CHAN_PATH_MAX];   /* srt_model PATH */
    char     served_name[SRT_CHAN_NAME_MAX];  /* srt_model ... name=X (default: file stem) */
    char     hooks_path[SRT_CHAN_PATH_MAX];   /* srt_forward_hooks FILE, "" if none */
    char     hooks_search[SRT_CHAN_PATH_MAX]; /* srt_hooks_path DIRS, "" = $SRT_HOOKS_PATH */
    char     chat_template[SRT_CHAN_PATH_MAX];/* srt_chat_template FILE, "" = the model's own */
    int32_t  device;                          /* srt_chan_device */
    int32_t  threads;                         /* srt_threads, 0 = auto */
    int32_t  context_length;                  /* srt_context_length, 0 = model's own */
    int32_t  max_running_requests;            /* srt_max_running_requests, 0 = auto */
    int32_t  max_queued_requests;             /* srt_max_queued_requests */
    int32_t  grammar_jump_forward;            /* srt_grammar_jump_forward on|off (here: it fills
                                                 the hole before the int64, the size stays) */
    int64_t  max_total_tokens;                /* srt_max_total_tokens (KV budget), 0 = auto */
    float    mem_fraction_static;             /* srt_mem_fraction_static, 0 = auto */
    int32_t  chunked_prefill_size;            /* srt_chunked_prefill_size, <= 0 = off */
    int32_t  schedule_policy;                 /* srt_chan_policy */
    int32_t  tp_size;                         /* srt_tp_size */
    int32_t  radix_cache;                     /* srt_radix_cache on|off */
    int32_t  page_size;                       /* srt_page_size */
    int32_t  slots;                           /* request slots in this channel */
    int32_t  slot_tokens;                     /* token capacity of one slot (prompt + output) */
    int32_t  sched_spin_us;                   /* srt_scheduler_spin: busy-wait before blocking */
    int32_t  cuda_graph;                      /* srt_cuda_graph: 0 on where possible, -1 off */
    int32_t  numerics;                        /* srt_numerics: srt_chan_numerics */
    int32_t  kv_cache_dtype;                  /* srt_kv_cache_dtype: srt_chan_kv_dtype */
    /* srt_control_vector FILE scale=S layers=A-B name=N per_request */
    char     cvec_path[SRT_CHAN_PATH_MAX];    /* "" if none */
    char     cvec_name[SRT_CHAN_NAME_MAX];    /* "" = "control_vector" */
    float    cvec_scale;
    int32_t  cvec_layer_start, cvec_layer_end;/* inclusive; 0 = llama.cpp's defaults */
    int32_t  cvec_per_request;
    int32_t  weights_mmap;                    /* srt_weights_mmap on|off (in the hole before the
                                                 uint64: the size stays) */
    /* srt_max_activation_bytes: each slot's activation area ("return_activations"), 0 = off.
     * Part of the geometry, like slots and slot_tokens. */
    uint64_t act_bytes;
    /* Doorbells and locks: filesystem sockets and lock files in this directory, which must
     * be mode 0700 and owned by the user of the workers and schedulers, so that no other
     * local user can bind a name first (nginx: srt_temp_path; tests and tools:
     * srt_chan_sock_dir_make). Required, absolute; fixed when the channel is formatted. */
    char     sock_dir[SRT_CHAN_SOCK_DIR_MAX];
} srt_chan_config;

/* ---- scheduler state, published in the header for workers and /health ---- */

typedef enum srt_chan_sched_state {
    SRT_CHAN_SCHED_NONE     = 0,  /* never started */
    SRT_CHAN_SCHED_LOADING  = 1,  /* lock taken, model loading: 503 */
    SRT_CHAN_SCHED_READY    = 2,  /* serving */
    SRT_CHAN_SCHED_HANDOVER = 3,  /* old scheduler draining on reload: accept, queue for the next */
    SRT_CHAN_SCHED_DOWN     = 4,  /* crashed or stopped: 503 until respawned */
    SRT_CHAN_SCHED_FAILED   = 5,  /* load failed (message in sched_msg): 503 */
} srt_chan_sched_state;

/* What the scheduler learned from the model, for /v1/models, /get_model_info and validation. */
typedef struct srt_chan_model_info {
    int32_t  vocab_size;
    int32_t  context_length;         /* effective: min(model, srt_context_length) */
    int32_t  max_running_requests;   /* effective */
    int64_t  max_total_tokens;       /* effective KV budget in tokens */
    int32_t  n_eos;
    int32_t  eos_ids[8];
    char     arch[64];               /* "llama", "qwen2", ... */
    char     device[32];             /* "cpu", "cuda:0" */
    int32_t  hidden_size;            /* rows of returned activations */
    int32_t  n_layers;               /* model.layers.0..n_layers-1 */
} srt_chan_model_info;

/* A request as the scheduler sees it after srt_chan_sched_pop_request(). The pointers are into
 * shared memory and stay valid until srt_chan_sched_finish() on this (slot, gen). */
typedef struct srt_chan_req {
    uint32_t                 slot;
    uint32_t                 gen;
    uint64_t                 ticket;      /* submission order */
    uint64_t                 group;       /* n > 1: same non-zero group for the siblings */
    const int32_t           *prompt;
    uint32_t                 n_prompt;
    uint32_t                 max_output;  /* capacity for generated tokens in this slot */
    const srt_request       *rq;          /* sampling and the rest of the contract */
} srt_chan_req;

typedef struct srt_chan srt_chan;          /* process-local handle */

/* ---- both sides ---- */

/* Bytes needed for a channel with this config (slots, slot_tokens). */
size_t srt_chan_size(const srt_chan_config *cfg);

/* Format fresh memory (size from srt_chan_size) as a channel; picks a random channel id. */
int srt_chan_format(void *mem, size_t size, const srt_chan_config *cfg, srt_err *err);

/* Check that mem holds a channel and make a process-local handle for it. */
srt_chan *srt_chan_attach(void *mem, size_t size, srt_err *err);

/* For tests and tools that make their own channel (nginx uses srt_temp_path): a new mode-0700
 * directory under $TMPDIR (or /tmp) for cfg.sock_dir, its path written to dir (cap >=
 * SRT_CHAN_SOCK_DIR_MAX). srt_chan_sock_dir_remove removes the files in it, then it. */
int srt_chan_sock_dir_make(char *dir, size_t cap, srt_err *err);
void srt_chan_sock_dir_remove(const char *dir);

/* Removes what channels that have no process left put in sock_dir (nginx's srt_temp_path),
 * leaving every file a live process may use:
 *   "<id>-sched.lock" and "<id>-sched"   when nobody holds the lock (flock, non-blocking;
 *                                        both removed while this call holds it): no scheduler
 *                                        runs the channel now, and a successor takes the lock
 *                                        and binds its doorbell afresh;
 *   "lock-<pid>-<key>"                   when process pid is gone, or is gone_pid (the caller,
 *                                        exiting: nginx's master at its exit), and nobody
 *                                        holds the lock;
 *   "<id>-w<pid>"                        when process pid is gone (a worker's doorbell).
 * For nginx's master at startup (gone_pid 0), after a crash or kill -9 of a previous nginx
 * left them, and at its exit (gone_pid its own pid, every child reaped). Errors are ignored:
 * a file that cannot be judged stays. */
void srt_chan_sock_dir_sweep(const char *dir, int gone_pid);
/* Removes channel chan_id's files from dir ("<id>-sched", its lock, workers' doorbells) and,
 * when key_pid > 0, the key locks "lock-<key_pid>-*", held or not: for a process that knows
 * nobody will use them again (nginx's master at its exit: its workers are reaped and it
 * spawns no scheduler again; one still exiting keeps its open files). */
void srt_chan_sock_dir_forget(const char *dir, uint64_t chan_id, int key_pid);
void srt_chan_detach(srt_chan *c);

const srt_chan_config *srt_chan_get_config(const srt_chan *c);

/* Reload: give a live channel new directive values for the next scheduler. The geometry
 * (slots, slot_tokens) must be unchanged, else SRT_ERROR (make a new channel). Workers of the
 * old generation keep reading the scalar limits meanwhile: each is one aligned store, so they
 * see the old or the new value, never a mix. The strings (model path, hooks, template) are
 * read only by a scheduler started after this returns. */
int srt_chan_reconfigure(srt_chan *c, const srt_chan_config *cfg, srt_err *err);
uint64_t srt_chan_id(const srt_chan *c);

int  srt_chan_sched_state_get(const srt_chan *c, char *msg, size_t msg_len);
int  srt_chan_model_info_get(const srt_chan *c, srt_chan_model_info *info);
pid_t srt_chan_sched_pid(const srt_chan *c);

/* Counters (approximate, for /health and metrics). */
typedef struct srt_chan_stats {
    uint32_t slots_total, slots_used, queued, running;
    uint64_t submitted, completed, aborted, rejected_full;
    uint64_t withdrawn;     /* of aborted: withdrawn before a scheduler took them */
} srt_chan_stats;
void srt_chan_stats_get(const srt_chan *c, srt_chan_stats *st);

/* CLOCK_MONOTONIC (srt_chan_now_ns) of the scheduler's last step, wake-up (at least once a
 * second) or state change; 0 if none yet. A stale one means a stopped or wedged scheduler. */
uint64_t srt_chan_heartbeat_ns(const srt_chan *c);

/* ---- scheduler side (the scheduler process; F builds on this) ----
 *
 * Entry point expected from src/sched:  int srt_sched_run(srt_chan *c, srt_err *err);
 * It reads its configuration from srt_chan_get_config(c), calls srt_chan_sched_set_state
 * (LOADING, then READY or FAILED), loops until srt_chan_sched_stopping(c), and returns SRT_OK.
 * The process around it (nginx helper, or a test) has already called srt_chan_sched_open().
 */

/* Become the channel's only scheduler: bind the scheduler doorbell. If another live process
 * owns it (reload hand-over), block until that process exits (pidfd, no polling), then take it.
 * Sets sched_pid. Returns SRT_OK, or SRT_ERROR with err filled. */
int srt_chan_sched_open(srt_chan *c, srt_err *err);

/* Before srt_chan_sched_open(): also hold a lock named `key` (e.g. nginx master pid + model
 * name) while owning the channel. A reload that changes the channel's geometry makes a new
 * channel; the key still keeps its scheduler from starting before the old one has exited.
 * Waiting is on the holder's pidfd, not a poll loop. key is copied (at most 80 bytes). */
void srt_chan_sched_set_lock_key(srt_chan *c, const char *key);

/* Publish the scheduler state; msg (may be NULL) is shown in 503 bodies and /health.
 * READY also publishes info (may be NULL for other states). */
void srt_chan_sched_set_state(srt_chan *c, srt_chan_sched_state st, const char *msg,
                              const srt_chan_model_info *info);

/* Block until a worker rings (new request or abort), a stop is requested, or timeout_ms
 * passes (-1 = forever). Flushes pending worker doorbells first and reclaims slots of dead
 * workers. Returns 1 if woken, 0 on timeout, SRT_ERROR on error. */
int srt_chan_sched_wait(srt_chan *c, int timeout_ms);

/* The scheduler's doorbell fd (readable when rung), for callers that run their own poll(). */
int srt_chan_sched_fd(const srt_chan *c);

/* Pop the oldest QUEUED request: 1 = got one in *req (now RUNNING), 0 = none. Never blocks. */
int srt_chan_sched_pop_request(srt_chan *c, srt_chan_req *req);

/* Append generated tokens. logprobs may be NULL; top_ids/top_lps (n * top_n entries each, row
 * i for token i) may be NULL. Returns SRT_OK, or SRT_ERROR if (slot, gen) is stale or the slot's
 * output area is full. Wakes the owner at the next srt_chan_sched_flush/wait. */
int srt_chan_sched_push_tokens(srt_chan *c, uint32_t slot, uint32_t gen, const int32_t *ids,
                               const float *logprobs, uint32_t n, const int32_t *top_ids,
                               const float *top_lps, uint32_t top_n);

/* Finish a request: reason, the matched stop id (or -1), prompt tokens served from the prefix
 * cache, and a message for SRT_FINISH_ERROR (may be NULL). After this the slot is not
 * the scheduler's any more. Returns SRT_OK or SRT_ERROR for a stale handle. */
int srt_chan_sched_finish(srt_chan *c, uint32_t slot, uint32_t gen, srt_finish_reason reason,
                          int32_t stop_id, uint32_t cached_tokens, const char *errmsg);

/* 1 if the worker gave up on this request (client gone, worker died) or the handle is stale:
 * drop it, free its KV, and call srt_chan_sched_finish(.., SRT_FINISH_ABORT, ..). */
int srt_chan_sched_is_aborted(const srt_chan *c, uint32_t slot, uint32_t gen);

/* Ring every worker that got tokens or finishes since the last flush. Call once per step. */
void srt_chan_sched_flush(srt_chan *c);

/* Abort slots whose owner process is gone, and fail (FINISH_ERROR) slots still RUNNING for
 * a scheduler process that is gone. Returns how many. (Also run by srt_chan_sched_open, and
 * by srt_chan_sched_wait at most once a second.) */
int srt_chan_sched_reclaim(srt_chan *c);

/* 0 = keep going; 1 = graceful stop (reload/quit: finish running requests, pop no new ones,
 * then return); 2 = stop now (finish everything with ABORT and return). */
int srt_chan_sched_stopping(const srt_chan *c);

/* Request a stop (async-signal-safe; used by the process's signal handlers). */
void srt_chan_sched_request_stop(srt_chan *c, int how);

/* Publish the scheduler's metrics (the module publishes its srt_sched_metrics, plain
 * data, and workers render the text when /metrics is read: rendering on every step that
 * finishes a request cost the scheduler ~40 us each). Bytes, truncated to
 * SRT_CHAN_METRICS_MAX / 2. Cheap (one memcpy); call it every step or on a timer. */
void srt_chan_sched_publish_metrics(srt_chan *c, const void *data, size_t len);

/* Release the scheduler role. After a graceful stop (1) it publishes HANDOVER, which keeps
 * accepting requests for a successor, only if a newer configuration adopted the channel
 * since the one this scheduler serves (srt_chan_adopt); otherwise (quit, a reload that gave
 * the model a new channel) DOWN, which fails what is queued. A load failure stays FAILED. */
void srt_chan_sched_close(srt_chan *c);

/* Master: a configuration (startup or reload) takes this channel; returns its generation.
 * Called once per configuration, after everything that can fail in loading it. */
uint32_t srt_chan_adopt(srt_chan *c);
/* Scheduler: the generation of the configuration it was started for (0 if none). */
void srt_chan_sched_set_generation(srt_chan *c, uint32_t generation);

/* Supervisor side: scheduler process `pid` died. Fails the RUNNING slots it had popped with
 * SRT_FINISH_ERROR `why` and wakes their owners. If it still was the channel's scheduler
 * (no successor has taken over yet), also publishes DOWN, which fails the QUEUED slots too. */
void srt_chan_sched_crashed(srt_chan *c, pid_t pid, const char *why);

/* A consistent copy of the last published metrics bytes into buf (at most cap); returns
 * their length, 0 when none were published yet. */
size_t srt_chan_metrics_read(const srt_chan *c, void *buf, size_t cap);

/* ---- admin mailbox (srt_admin): one command at a time, worker -> scheduler ----
 *
 * The scheduler owns state that has no lock (the hook registry), so admin commands are
 * carried to it and applied between forward passes. One mailbox per channel:
 *
 *   FREE --worker post--> POSTED --scheduler take--> TAKEN --scheduler reply--> DONE
 *   DONE --worker result--> FREE
 *
 * The worker rings the scheduler's doorbell on post; the scheduler rings the worker's on
 * reply. A worker that gives up (client gone, timeout) cancels: whichever side comes second
 * frees the mailbox. A mailbox left by a dead worker is reclaimed by the next post/take. */

/* Worker: post a command (text, len < SRT_CHAN_ADMIN_REQ_MAX). Returns SRT_OK with *ticket
 * set, 1 when another command is in flight (try again), SRT_ERROR when too long. */
int srt_chan_admin_post(srt_chan *c, const char *req, size_t len, uint64_t *ticket);
/* Worker: 1 = answered (status and up to cap bytes of body copied, *len set; the mailbox
 * is free again), 0 = not yet, SRT_ERROR = the ticket is not this mailbox's any more. */
int srt_chan_admin_result(srt_chan *c, uint64_t ticket, int *status, char *body, size_t cap,
                          size_t *len);
/* Worker: give up on the command (never blocks). */
void srt_chan_admin_cancel(srt_chan *c, uint64_t ticket);

/* Scheduler: take a posted command into req (NUL-terminated): its length, or 0 if none. */
size_t srt_chan_sched_admin_take(srt_chan *c, char *req, size_t cap);
/* Scheduler: answer the taken command and ring its worker. */
void srt_chan_sched_admin_reply(srt_chan *c, int status, const char *body, size_t len);

/* ---- worker side (nginx worker; src/ngx) ---- */

/* Bind this process's doorbell; returns its fd (readable when rung) or SRT_ERROR. The
 * doorbell is also rung whenever the scheduler state changes (e.g. the model became ready). */
int srt_chan_worker_open(srt_chan *c, srt_err *err);
/* Drain the doorbell after it became readable. */
void srt_chan_worker_drain(srt_chan *c);

typedef enum srt_chan_submit_status {
    SRT_CHAN_SUBMIT_OK       = 0,
    SRT_CHAN_SUBMIT_FULL     = 1,   /* no free slot or queue limit: 503 + Retry-After */
    SRT_CHAN_SUBMIT_DOWN     = 2,   /* no scheduler serving: 503 */
    SRT_CHAN_SUBMIT_TOO_LONG = 3,   /* prompt larger than a slot */
} srt_chan_submit_status;

/* Claim a slot, copy the prompt and sampling in, and queue it. On OK, slot and gen identify it.
 * group: 0, or a value shared by the n > 1 siblings (use the first sibling's ticket-free id
 * from srt_chan_new_group). */
srt_chan_submit_status srt_chan_submit(srt_chan *c, const int32_t *prompt, uint32_t n_prompt,
                                       const srt_request *rq, uint64_t group,
                                       uint32_t *slot, uint32_t *gen);
uint64_t srt_chan_new_group(srt_chan *c);

/* What the worker reads from its slot. */
typedef struct srt_chan_output {
    uint32_t           n_out;         /* tokens generated so far (all of them, from 0) */
    const int32_t     *ids;           /* ids[0..n_out) */
    const float       *logprobs;      /* logprobs[0..n_out) (0 when not requested) */
    srt_finish_reason  finish;        /* NONE while running */
    int32_t            stop_id;       /* matched stop token id, or -1 */
    uint32_t           cached_tokens;
    const char        *errmsg;        /* for SRT_FINISH_ERROR */
    /* CLOCK_MONOTONIC (one clock for all processes), 0 when not reached: the worker queued
     * it, the scheduler took it, the scheduler finished it. For Server-Timing. */
    uint64_t           t_submit_ns;
    uint64_t           t_pop_ns;
    uint64_t           t_done_ns;
} srt_chan_output;

/* CLOCK_MONOTONIC in ns, the clock of the t_*_ns stamps. */
uint64_t srt_chan_now_ns(void);

/* Snapshot of the slot's output (acquire). Returns SRT_ERROR for a stale handle. */
int srt_chan_read(srt_chan *c, uint32_t slot, uint32_t gen, srt_chan_output *out);

/* Top-logprobs row of token i (i < n_out): returns the number of entries (0 if not requested
 * or already overwritten because the worker fell SRT_CHAN_TOP_RING tokens behind). */
uint32_t srt_chan_read_top(srt_chan *c, uint32_t slot, uint32_t gen, uint32_t i,
                           int32_t *ids, float *lps, uint32_t cap);

/* Returned activations. Scheduler: the slot's area (NULL, *cap 0 when act_bytes is 0 or the
 * handle is stale), filled with srt_act_record + data before srt_chan_sched_act_done(len)
 * and srt_chan_sched_finish(), whose release publishes both. Worker: after the finish, the
 * area and its length (*len 0: none); valid until srt_chan_release(). */
void *srt_chan_sched_act_area(srt_chan *c, uint32_t slot, uint32_t gen, size_t *cap);
int   srt_chan_sched_act_done(srt_chan *c, uint32_t slot, uint32_t gen, size_t len);
const void *srt_chan_read_act(srt_chan *c, uint32_t slot, uint32_t gen, size_t *len);

/* The worker is done with the slot: after DONE it frees it; before DONE it marks it aborted
 * (the scheduler frees it when it notices). Either way the handle is dead afterwards. */
void srt_chan_release(srt_chan *c, uint32_t slot, uint32_t gen);

#endif
