/* Tensor-parallel ranks of the scheduler process: start, per-step batch broadcast, death
 * detection, teardown. See tp_group.h. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hooks/registry.h"
#include "hooks/admin.h"
#include "sched/tp_group.h"
#include "srt/backend.h"

#define TP_MAX_RANKS      8
#define TP_BATCH_MAGIC    0x54504231u   /* "TPB1" */
#define TP_MAX_PAYLOAD    ((size_t)1 << 30)

enum { TP_OP_FORWARD = 1, TP_OP_EXIT = 2, TP_OP_ADMIN = 3, TP_OP_REQ_BEGIN = 4, TP_OP_REQ_END = 5 };

/* A request's hook selection, as every rank applies it (srt_tp_group_request_begin). */
typedef struct tp_req_msg {
    uint64_t          id;
    srt_request_hooks sel;
} tp_req_msg;

/* What rank 0 sends before every step. */
typedef struct tp_control {
    int32_t  op;
    int32_t  pad;
    uint64_t payload_bytes;
} tp_control;

/* The runner shape, sent once after rank 0 sized its KV pool. */
typedef struct tp_setup {
    int32_t max_batch_tokens, max_seqs, n_slots, precise_matmul, kv_cache_dtype;
    int32_t device, device_index;   /* rank k computes on device_index + k */
    double  mem_fraction;
    int32_t weights_mmap;
} tp_setup;

struct srt_tp_group {
    int                 size;
    srt_nccl_lib       *nccl;      /* rank 0's, on the CUDA backend (its runner's tensor comm) */
    srt_cpu_comm_group *group;
    srt_comm           *comm;      /* rank 0's */
    pid_t               pids[TP_MAX_RANKS];
    int                 exited[TP_MAX_RANKS];
    int                 broken;
    int                 ready;     /* setup done: the ranks are in their batch loop */
    void               *buf;
    size_t              buf_cap;
};

/* ---------------- the wire form of a batch ---------------- */

typedef struct tp_batch_header {
    uint32_t magic;
    int32_t  n_tokens, n_seqs, forward_mode, n_logit_rows;
    int32_t  has_request_ids, has_logit_rows;
    int32_t  n_seq_slots;   /* sum of seq_len */
} tp_batch_header;

static size_t batch_bytes(int64_t n_tokens, int64_t n_seqs, int64_t n_seq_slots, int has_ids, int64_t n_rows)
{
    return sizeof(tp_batch_header) + (has_ids ? (size_t)n_tokens * 8 : 0) +
           4 * ((size_t)n_tokens * 3 + (size_t)(n_seqs + 1) + (size_t)n_seqs + (size_t)n_seq_slots + (size_t)n_rows);
}

size_t srt_tp_batch_encode(const srt_forward_batch *b, void *buf, size_t cap)
{
    tp_batch_header h = {
        .magic = TP_BATCH_MAGIC, .n_tokens = b->n_tokens, .n_seqs = b->n_seqs, .forward_mode = b->forward_mode,
        .n_logit_rows = b->logit_rows ? b->n_logit_rows : 0,
        .has_request_ids = b->request_ids != NULL, .has_logit_rows = b->logit_rows != NULL,
    };
    int64_t slots = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        slots += b->seq_len[s] > 0 ? b->seq_len[s] : 0;
    h.n_seq_slots = (int32_t)slots;
    size_t need = batch_bytes(h.n_tokens, h.n_seqs, slots, h.has_request_ids, h.n_logit_rows);
    if (!buf || cap < need)
        return need;
    char *p = buf;
#define PUT(src, bytes) do { memcpy(p, (src), (bytes)); p += (bytes); } while (0)
    PUT(&h, sizeof h);
    if (h.has_request_ids)
        PUT(b->request_ids, (size_t)h.n_tokens * 8);
    PUT(b->token_ids, (size_t)h.n_tokens * 4);
    PUT(b->positions, (size_t)h.n_tokens * 4);
    PUT(b->out_slots, (size_t)h.n_tokens * 4);
    PUT(b->seq_start, (size_t)(h.n_seqs + 1) * 4);
    PUT(b->seq_len, (size_t)h.n_seqs * 4);
    for (int32_t s = 0; s < b->n_seqs; s++)
        if (b->seq_len[s] > 0)
            PUT(b->seq_slots[s], (size_t)b->seq_len[s] * 4);
    if (h.has_logit_rows)
        PUT(b->logit_rows, (size_t)h.n_logit_rows * 4);
#undef PUT
    return need;
}

int srt_tp_batch_decode(const void *buf, size_t len, int32_t max_seqs, const int32_t **seq_ptrs,
                        srt_forward_batch *b, srt_err *err)
{
    tp_batch_header h;
    if (len < sizeof h)
        return srt_err_set(err, "tp batch: %zu bytes, shorter than its header", len);
    memcpy(&h, buf, sizeof h);
    if (h.magic != TP_BATCH_MAGIC)
        return srt_err_set(err, "tp batch: bad magic 0x%08x", h.magic);
    if (h.n_tokens < 0 || h.n_seqs < 0 || h.n_seqs > max_seqs || h.n_logit_rows < 0 || h.n_seq_slots < 0)
        return srt_err_set(err, "tp batch: bad counts (%d tokens, %d seqs of at most %d, %d rows, %d slots)",
                           h.n_tokens, h.n_seqs, max_seqs, h.n_logit_rows, h.n_seq_slots);
    size_t need = batch_bytes(h.n_tokens, h.n_seqs, h.n_seq_slots, h.has_request_ids != 0, h.n_logit_rows);
    if (need != len)
        return srt_err_set(err, "tp batch: %zu bytes where its header says %zu", len, need);
    const char *p = (const char *)buf + sizeof h;
    memset(b, 0, sizeof *b);
    b->n_tokens = h.n_tokens;
    b->n_seqs = h.n_seqs;
    b->forward_mode = h.forward_mode;
    /* 8-byte ids first, right after a 32-byte header: aligned in a malloc'd buffer */
    if (h.has_request_ids) {
        b->request_ids = (const uint64_t *)p;
        p += (size_t)h.n_tokens * 8;
    }
    b->token_ids = (const int32_t *)p, p += (size_t)h.n_tokens * 4;
    b->positions = (const int32_t *)p, p += (size_t)h.n_tokens * 4;
    b->out_slots = (const int32_t *)p, p += (size_t)h.n_tokens * 4;
    b->seq_start = (const int32_t *)p, p += (size_t)(h.n_seqs + 1) * 4;
    b->seq_len = (const int32_t *)p, p += (size_t)h.n_seqs * 4;
    int64_t used = 0;
    for (int32_t s = 0; s < h.n_seqs; s++) {
        int32_t l = b->seq_len[s];
        if (l < 0 || used + l > h.n_seq_slots)
            return srt_err_set(err, "tp batch: sequence %d length %d overruns %d slots", s, l, h.n_seq_slots);
        seq_ptrs[s] = (const int32_t *)p + used;
        used += l;
    }
    if (used != h.n_seq_slots)
        return srt_err_set(err, "tp batch: sequences hold %lld slots, header says %d", (long long)used,
                           h.n_seq_slots);
    p += (size_t)used * 4;
    b->seq_slots = seq_ptrs;
    if (h.has_logit_rows) {
        b->n_logit_rows = h.n_logit_rows;
        b->logit_rows = (const int32_t *)p;
    }
    return SRT_OK;
}

/* ---------------- building a rank's shard (every rank, rank 0 included) ---------------- */

/* On the CUDA backend the tensor collectives go over NCCL (the runner makes the communicator:
 * rank 0's unique id is broadcast over the CPU communicator); batches, hook commands and this
 * setup stay on the CPU communicator. Every rank loads libnccl.so.2 ($SRT_NCCL_SO_PATH) and
 * they agree that all could before any waits inside the NCCL init. */
static int build_shard(srt_comm *comm, srt_model *m, const tp_setup *su, int n_threads, srt_nccl_lib **nccl,
                       srt_runner **r, srt_kv_pool **kv, srt_err *err)
{
    int cuda = su->device == SRT_RUNNER_CUDA;
    srt_err e2 = { { 0 } };
    *r = NULL;
    *kv = NULL;
    if (cuda) {
        float loaded = (*nccl || (*nccl = srt_nccl_load(NULL, err))) ? 1.0f : 0.0f;
        if (srt_comm_all_reduce_sum_f32(comm, &loaded, 1, loaded ? err : &e2) != SRT_OK)
            return SRT_ERROR;
        if (loaded != (float)comm->size)
            return *nccl ? srt_err_set(err, "tp: %d of %d ranks could not load NCCL", comm->size - (int)loaded,
                                       comm->size)
                         : SRT_ERROR;
    }
    srt_runner_opts ro = {
        .max_batch_tokens = su->max_batch_tokens, .max_seqs = su->max_seqs, .n_threads = n_threads, .comm = comm,
        .precise_matmul = su->precise_matmul, .device = su->device, .device_index = su->device_index + comm->rank,
        .mem_fraction = su->mem_fraction, .nccl = cuda ? *nccl : NULL, .weights_mmap = su->weights_mmap,
    };
    if (srt_runner_create(m, &ro, r, err) != SRT_OK)
        return SRT_ERROR;
    srt_dtype kvt = su->kv_cache_dtype > 0 ? (srt_dtype)(su->kv_cache_dtype - 1) : cuda ? SRT_BF16 : SRT_F32;
    return srt_kv_pool_create_on(srt_model_config_of(m), comm->size, su->n_slots, kvt,
                                 srt_runner_backend(*r), kv, err);
}

/* ---------------- a rank process ---------------- */

static int grow(void **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return SRT_OK;
    void *n = realloc(*buf, need);
    if (!n)
        return SRT_ERROR;
    *buf = n;
    *cap = need;
    return SRT_OK;
}

/* Loads, builds its shard, then runs every batch rank 0 sends until told to exit. */
static int rank_main(srt_cpu_comm_group *grp, int rank, const srt_tp_group_opts *o, srt_err *err)
{
    srt_comm *comm = srt_cpu_comm_join(grp, rank, err);
    srt_model *m = NULL;
    srt_hook_registry *hooks = NULL;
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_nccl_lib *nccl = NULL;
    void *buf = NULL;
    size_t cap = 0, lcap = 0;
    float *logits = NULL;
    const int32_t **seq_ptrs = NULL;
    int rc = SRT_ERROR;

    if (!comm)
        return SRT_ERROR;
    /* idle ranks wait for the next batch as long as rank 0 lives; a dead peer still fails fast */
    srt_cpu_comm_set_timeout_ms(comm, INT32_MAX);
    if (srt_model_load(o->model_path, &m, err) != SRT_OK)
        goto out;
    if ((o->hooks_path && o->hooks_path[0]) || o->cvec) {
        int n_mod;
        srt_module *mods = srt_model_modules(m, &n_mod);
        hooks = srt_hook_registry_create(mods, n_mod, err);
        if (!hooks)
            goto out;
        srt_hook_registry_set_tp(hooks, rank, o->size);
        if (o->hooks_path && o->hooks_path[0] &&
            (srt_hook_registry_set_search_path(hooks, o->hooks_search && o->hooks_search[0] ? o->hooks_search : NULL,
                                               err) != SRT_OK ||
             srt_hook_registry_load_file(hooks, o->hooks_path, err) != SRT_OK))
            goto out;
        /* the decoder layers' outputs are replicated: each rank adds the same vector to its copy */
        if (o->cvec && srt_hook_control_vector_load(hooks, o->cvec, srt_model_config_of(m)->n_layers, err) != SRT_OK)
            goto out;
    }
    tp_setup su;
    if (srt_comm_broadcast(comm, &su, sizeof su, 0, err) != SRT_OK)
        goto out;
    int ok = build_shard(comm, m, &su, o->n_threads, &nccl, &r, &kv, err) == SRT_OK;
    /* everyone reports readiness, so rank 0 never waits on a rank that failed to build */
    float okf = ok ? 1.0f : 0.0f;
    srt_err e2;
    if (srt_comm_all_reduce_sum_f32(comm, &okf, 1, &e2) != SRT_OK || !ok)
        goto out;
    if (hooks && srt_runner_backend(r)->ops->alloc) {
        srt_hook_registry_use_backend(hooks, srt_runner_backend(r));
    }
    if (hooks && srt_hook_registry_check_entries(hooks, err) != SRT_OK)
        goto out;
    srt_log(SRT_LOG_INFO, "tp rank %d of %d ready (pid %d)", rank, o->size, (int)getpid());
    int32_t vocab = srt_model_config_of(m)->vocab_size;
    seq_ptrs = calloc((size_t)su.max_seqs + 1, sizeof *seq_ptrs);
    if (!seq_ptrs)
        goto out;
    for (;;) {
        tp_control ctl;
        srt_forward_batch b;
        if (srt_comm_broadcast(comm, &ctl, sizeof ctl, 0, err) != SRT_OK)
            goto out;
        if (ctl.op == TP_OP_EXIT)
            break;
        if (ctl.op == TP_OP_ADMIN && ctl.payload_bytes > 0 && ctl.payload_bytes <= SRT_CHAN_ADMIN_REQ_MAX) {
            /* the same hook command on every rank keeps the registries (and ids) identical */
            char cmd[SRT_CHAN_ADMIN_REQ_MAX + 1];
            char *body = NULL;
            size_t blen = 0;
            if (srt_comm_broadcast(comm, cmd, (size_t)ctl.payload_bytes, 0, err) != SRT_OK)
                goto out;
            cmd[ctl.payload_bytes - 1] = 0;
            srt_hook_admin_apply(hooks, cmd, &body, &blen);
            free(body);
            continue;
        }
        if (ctl.op == TP_OP_REQ_BEGIN && ctl.payload_bytes == sizeof(tp_req_msg)) {
            tp_req_msg rm;
            srt_err e3 = { { 0 } };
            if (srt_comm_broadcast(comm, &rm, sizeof rm, 0, err) != SRT_OK)
                goto out;
            if (srt_hook_request_begin(hooks, rm.id, &rm.sel, &e3) != SRT_OK) {
                /* rank 0 applied it: this rank would compute something else */
                srt_err_set(err, "tp rank %d: a request's hook selection that rank 0 took: %s", rank, e3.msg);
                goto out;
            }
            continue;
        }
        if (ctl.op == TP_OP_REQ_END && ctl.payload_bytes == sizeof(uint64_t)) {
            uint64_t id;
            if (srt_comm_broadcast(comm, &id, sizeof id, 0, err) != SRT_OK)
                goto out;
            srt_hook_request_end(hooks, id);
            continue;
        }
        if (ctl.op != TP_OP_FORWARD || ctl.payload_bytes > TP_MAX_PAYLOAD ||
            grow(&buf, &cap, (size_t)ctl.payload_bytes) != SRT_OK) {
            srt_err_set(err, "tp rank %d: bad control message (op %d, %llu bytes)", rank, ctl.op,
                        (unsigned long long)ctl.payload_bytes);
            goto out;
        }
        if (srt_comm_broadcast(comm, buf, (size_t)ctl.payload_bytes, 0, err) != SRT_OK ||
            srt_tp_batch_decode(buf, (size_t)ctl.payload_bytes, su.max_seqs, seq_ptrs, &b, err) != SRT_OK)
            goto out;
        size_t rows = b.logit_rows ? (size_t)b.n_logit_rows : (size_t)b.n_seqs;
        size_t need = (rows ? rows : 1) * (size_t)vocab * sizeof(float);
        if (grow((void **)&logits, &lcap, need) != SRT_OK) {
            srt_err_set(err, "tp rank %d: out of memory for logits", rank);
            goto out;
        }
        /* the batch was validated on rank 0 with the same rules, so a refusal here means
         * the ranks disagree: leave, and the group restarts */
        if (srt_runner_forward(r, kv, &b, logits, err) != SRT_OK)
            goto out;
    }
    rc = SRT_OK;
out:
    free(logits);
    free(buf);
    free(seq_ptrs);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
    srt_nccl_unload(nccl);
    srt_hook_registry_free(hooks);
    srt_model_free(m);
    srt_comm_destroy(comm);
    return rc;
}

/* ---------------- rank 0 ---------------- */

int srt_tp_group_start(const srt_tp_group_opts *o, srt_tp_group **out, srt_err *err)
{
    *out = NULL;
    if (o->size < 2 || o->size > TP_MAX_RANKS)
        return srt_err_set(err, "srt_tp_size %d: 2..%d ranks are supported", o->size, TP_MAX_RANKS);
    srt_tp_group *g = calloc(1, sizeof *g);
    if (!g)
        return srt_err_set(err, "out of memory");
    g->size = o->size;
    g->group = srt_cpu_comm_group_create(o->size, 1 << 20, err);
    if (!g->group)
        goto fail;
    g->comm = srt_cpu_comm_join(g->group, 0, err);
    if (!g->comm)
        goto fail;
    /* rank 0 waits for peers loading the model, then for peers in a step */
    srt_cpu_comm_set_timeout_ms(g->comm, 300000);
    pid_t parent = getpid();
    for (int rank = 1; rank < o->size; rank++) {
        pid_t pid = fork();
        if (pid < 0) {
            srt_err_set(err, "tp: fork of rank %d: %s", rank, strerror(errno));
            goto fail;
        }
        if (pid == 0) {
            /* a rank lives only as long as its scheduler; signals are the scheduler's business */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = SIG_IGN;
            sigaction(SIGINT, &sa, NULL);
            sigaction(SIGQUIT, &sa, NULL);
            sigaction(SIGHUP, &sa, NULL);
            sigaction(SIGPIPE, &sa, NULL);
            sa.sa_handler = SIG_DFL;
            sigaction(SIGTERM, &sa, NULL);
            sigaction(SIGCHLD, &sa, NULL);
            srt_err e = { { 0 } };
            int rc = rank_main(g->group, rank, o, &e);
            if (rc != SRT_OK)
                srt_log(SRT_LOG_ERROR, "tp rank %d (pid %d): %s", rank, (int)getpid(), e.msg);
            _exit(rc == SRT_OK ? 0 : 1);
        }
        g->pids[rank] = pid;
    }
    *out = g;
    return SRT_OK;
fail:
    srt_tp_group_stop(g);
    return SRT_ERROR;
}

srt_comm *srt_tp_group_comm(srt_tp_group *g) { return g->comm; }
int srt_tp_group_size(const srt_tp_group *g) { return g->size; }
pid_t srt_tp_group_pid(const srt_tp_group *g, int rank)
{
    return rank > 0 && rank < g->size ? g->pids[rank] : 0;
}

int srt_tp_group_check(srt_tp_group *g, srt_err *err)
{
    for (int rank = 1; rank < g->size; rank++) {
        int st;
        if (g->exited[rank] || g->pids[rank] <= 0)
            continue;
        pid_t r = waitpid(g->pids[rank], &st, WNOHANG);
        if (r == g->pids[rank] || (r < 0 && errno == ECHILD)) {
            g->exited[rank] = 1;
            g->broken = 1;
            srt_cpu_comm_group_abort(g->group);
            if (r > 0 && WIFSIGNALED(st))
                return srt_err_set(err, "tp rank %d (pid %d) was killed by signal %d", rank, (int)g->pids[rank],
                                   WTERMSIG(st));
            return srt_err_set(err, "tp rank %d (pid %d) exited", rank, (int)g->pids[rank]);
        }
    }
    if (g->broken)
        return srt_err_set(err, "tp group is broken");
    return SRT_OK;
}

int srt_tp_group_setup(srt_tp_group *g, srt_model *m, const srt_runner_opts *ro, int32_t n_slots,
                       srt_runner **runner, srt_kv_pool **kv, srt_err *err)
{
    tp_setup su = { ro->max_batch_tokens, ro->max_seqs, n_slots, ro->precise_matmul, ro->kv_cache_dtype,
                    ro->device, ro->device_index, ro->mem_fraction, ro->weights_mmap };
    srt_err e2;
    *runner = NULL;
    *kv = NULL;
    if (ro->backend || ro->tensor_comm || ro->nccl) {
        srt_err_set(err, "tp: the rank group makes its backends and communicators itself");
        goto fail;
    }
    if (srt_comm_broadcast(g->comm, &su, sizeof su, 0, err) != SRT_OK)
        goto broken;
    int ok = build_shard(g->comm, m, &su, ro->n_threads, &g->nccl, runner, kv, err) == SRT_OK;
    float ready = ok ? 1.0f : 0.0f;
    if (srt_comm_all_reduce_sum_f32(g->comm, &ready, 1, ok ? err : &e2) != SRT_OK)
        goto broken;
    if (!ok)
        goto fail;
    if (ready != (float)g->size) {
        srt_err_set(err, "tp: %d of %d ranks could not build their shard (see the log)", g->size - (int)ready,
                    g->size);
        goto fail;
    }
    g->ready = 1;
    return SRT_OK;
broken:
    g->broken = 1;
fail:
    srt_kv_pool_free(*kv);
    srt_runner_free(*runner);
    *runner = NULL;
    *kv = NULL;
    return SRT_ERROR;
}

int srt_tp_group_forward(srt_tp_group *g, srt_runner *r, srt_kv_pool *kv, const srt_forward_batch *b,
                         float *logits, srt_err *err)
{
    if (srt_tp_group_check(g, err) != SRT_OK)
        return SRT_ERROR;
    size_t need = srt_tp_batch_encode(b, NULL, 0);
    if (need > TP_MAX_PAYLOAD || grow(&g->buf, &g->buf_cap, need) != SRT_OK)
        return srt_err_set(err, "tp: a batch of %zu bytes cannot be sent", need);
    srt_tp_batch_encode(b, g->buf, g->buf_cap);
    tp_control ctl = { .op = TP_OP_FORWARD, .payload_bytes = need };
    if (srt_comm_broadcast(g->comm, &ctl, sizeof ctl, 0, err) != SRT_OK ||
        srt_comm_broadcast(g->comm, g->buf, need, 0, err) != SRT_OK ||
        srt_runner_forward(r, kv, b, logits, err) != SRT_OK) {
        /* the ranks run the same forward: any failure leaves them out of step */
        g->broken = 1;
        srt_cpu_comm_group_abort(g->group);
        return SRT_ERROR;
    }
    return SRT_OK;
}

void srt_tp_group_stop(srt_tp_group *g)
{
    if (!g)
        return;
    if (!g->ready)
        g->broken = 1;   /* ranks wait for their setup, not for an exit message */
    if (g->comm && !g->broken) {
        srt_err e;
        srt_err dummy;
        tp_control ctl = { .op = TP_OP_EXIT };
        if (srt_tp_group_check(g, &dummy) == SRT_OK) {
            srt_cpu_comm_set_timeout_ms(g->comm, 5000);
            if (srt_comm_broadcast(g->comm, &ctl, sizeof ctl, 0, &e) != SRT_OK)
                g->broken = 1;
        }
    }
    /* ranks still inside the exit broadcast would read an abort as a failure */
    if (g->group && g->broken)
        srt_cpu_comm_group_abort(g->group);
    for (int rank = 1; rank < g->size; rank++) {
        if (g->pids[rank] <= 0 || g->exited[rank])
            continue;
        /* ranks told to exit leave within moments; the rest are killed */
        int st, waited = 0;
        for (int i = 0; i < 200 && !waited; i++) {
            if (waitpid(g->pids[rank], &st, WNOHANG) != 0)
                waited = 1;
            else
                usleep(10000);
        }
        if (!waited) {
            srt_cpu_comm_group_abort(g->group);
            kill(g->pids[rank], SIGKILL);
            waitpid(g->pids[rank], &st, 0);
        }
        g->exited[rank] = 1;
    }
    srt_comm_destroy(g->comm);
    srt_cpu_comm_group_free(g->group);
    srt_nccl_unload(g->nccl);   /* rank 0's runner (its NCCL communicator) is freed before stop */
    free(g->buf);
    free(g);
}

/* A control message and its payload to every rank; a failure breaks the group. */
static int tp_send(srt_tp_group *g, int32_t op, const void *payload, size_t n, srt_err *err)
{
    tp_control ctl = { .op = op, .payload_bytes = n };
    if (g->broken || srt_tp_group_check(g, err) != SRT_OK ||
        srt_comm_broadcast(g->comm, &ctl, sizeof ctl, 0, err) != SRT_OK ||
        srt_comm_broadcast(g->comm, (void *)payload, n, 0, err) != SRT_OK) {
        g->broken = 1;
        srt_cpu_comm_group_abort(g->group);
        return SRT_ERROR;
    }
    return SRT_OK;
}

int srt_tp_group_request_begin(srt_tp_group *g, srt_hook_registry *reg, uint64_t request_id,
                               const srt_request_hooks *sel, srt_err *err)
{
    tp_req_msg *m = calloc(1, sizeof *m);   /* ~9 KiB: not on the scheduler's stack */
    int rc = SRT_ERROR;
    if (!m)
        return srt_err_set(err, "out of memory");
    m->id = request_id;
    m->sel = *sel;   /* one read of shared memory; every rank clamps the same bytes */
    srt_request_hooks_clamp(&m->sel);
    if (m->sel.n == 0) {
        rc = SRT_OK;
    } else if (srt_hook_request_begin(reg, request_id, &m->sel, err) == SRT_OK) {
        rc = tp_send(g, TP_OP_REQ_BEGIN, m, sizeof *m, err);
        if (rc != SRT_OK)
            srt_hook_request_end(reg, request_id);
    }
    free(m);
    return rc;
}

void srt_tp_group_request_end(srt_tp_group *g, srt_hook_registry *reg, uint64_t request_id)
{
    srt_err err;
    if (!srt_hook_request_selected(reg, request_id))
        return;   /* no selection: the ranks hold none either */
    srt_hook_request_end(reg, request_id);
    if (!g->broken)
        tp_send(g, TP_OP_REQ_END, &request_id, sizeof request_id, &err);
}

int srt_tp_group_admin_serve(srt_tp_group *g, srt_chan *c, srt_hook_registry *reg)
{
    char cmd[SRT_CHAN_ADMIN_REQ_MAX];
    srt_err err;

    size_t n = srt_chan_sched_admin_take(c, cmd, sizeof cmd);
    if (n == 0)
        return 0;
    cmd[sizeof cmd - 1] = 0;
    tp_control ctl = { .op = TP_OP_ADMIN, .payload_bytes = strlen(cmd) + 1 };
    if (g->broken || srt_tp_group_check(g, &err) != SRT_OK ||
        srt_comm_broadcast(g->comm, &ctl, sizeof ctl, 0, &err) != SRT_OK ||
        srt_comm_broadcast(g->comm, cmd, (size_t)ctl.payload_bytes, 0, &err) != SRT_OK) {
        g->broken = 1;
        srt_cpu_comm_group_abort(g->group);
        static const char down[] = "{\"error\":{\"message\":\"a tensor-parallel rank died; the model is restarting\","
                                   "\"type\":\"server_error\",\"param\":null,\"code\":503}}";
        srt_chan_sched_admin_reply(c, 503, down, sizeof down - 1);
        return 1;
    }
    srt_hook_admin_answer(c, reg, cmd);
    return 1;
}
