/* NCCL communicator, with libnccl.so.2 loaded at run time so that builds and CPU-only machines
 * never need NCCL. Only the handful of stable C entry points are declared here: the unique id
 * is 128 opaque bytes, a communicator is an opaque pointer, and the enums are NCCL's ABI. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "srt/comm.h"

typedef void *nccl_comm_t;
typedef struct { char internal[SRT_NCCL_UNIQUE_ID_BYTES]; } nccl_unique_id;

enum { NCCL_SUCCESS = 0 };
enum { NCCL_INT8 = 0, NCCL_FLOAT32 = 7 };
enum { NCCL_SUM = 0 };

struct srt_nccl_lib {
    void *handle;
    int (*get_version)(int *version);
    int (*get_unique_id)(nccl_unique_id *id);
    int (*comm_init_rank)(nccl_comm_t *comm, int nranks, nccl_unique_id id, int rank);
    int (*comm_destroy)(nccl_comm_t comm);
    int (*comm_abort)(nccl_comm_t comm);   /* optional: NULL when the library lacks it */
    int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op,
                      nccl_comm_t comm, void *stream);
    int (*all_gather)(const void *send, void *recv, size_t count, int dtype, nccl_comm_t comm,
                      void *stream);
    int (*broadcast)(const void *send, void *recv, size_t count, int dtype, int root,
                     nccl_comm_t comm, void *stream);
    const char *(*get_error_string)(int result);
};

typedef struct nccl_comm {
    srt_comm      base;
    srt_nccl_lib *lib;
    nccl_comm_t   comm;
    void         *stream;
    int           failed;   /* an op returned an error: destroy aborts instead */
} nccl_comm;

srt_nccl_lib *srt_nccl_load(const char *path, srt_err *err)
{
    srt_nccl_lib *lib;
    const char *env = getenv("SRT_NCCL_SO_PATH");
    const char *from = "";

    if (path == NULL || *path == 0) {
        path = "libnccl.so.2";
        if (env && *env) {
            path = env;
            from = " (from SRT_NCCL_SO_PATH)";
        }
    }
    lib = calloc(1, sizeof *lib);
    if (lib == NULL) {
        srt_err_set(err, "nccl: out of memory");
        return NULL;
    }
    lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib->handle == NULL) {
        const char *why = dlerror();
        srt_err_set(err, "nccl: cannot load \"%s\"%s: %s", path, from, why ? why : "dlopen failed");
        free(lib);
        return NULL;
    }
#define RESOLVE(field, sym)                                                                  \
    do {                                                                                     \
        *(void **)&lib->field = dlsym(lib->handle, sym);                                     \
        if (lib->field == NULL) {                                                            \
            srt_err_set(err, "nccl: \"%s\"%s has no symbol %s", path, from, sym);            \
            dlclose(lib->handle);                                                            \
            free(lib);                                                                       \
            return NULL;                                                                     \
        }                                                                                    \
    } while (0)
    RESOLVE(get_version, "ncclGetVersion");
    RESOLVE(get_unique_id, "ncclGetUniqueId");
    RESOLVE(comm_init_rank, "ncclCommInitRank");
    RESOLVE(comm_destroy, "ncclCommDestroy");
    RESOLVE(all_reduce, "ncclAllReduce");
    RESOLVE(all_gather, "ncclAllGather");
    RESOLVE(broadcast, "ncclBroadcast");
    RESOLVE(get_error_string, "ncclGetErrorString");
#undef RESOLVE
    *(void **)&lib->comm_abort = dlsym(lib->handle, "ncclCommAbort");
    return lib;
}

void srt_nccl_unload(srt_nccl_lib *lib)
{
    if (lib == NULL)
        return;
    dlclose(lib->handle);
    free(lib);
}

/* NCCL's version code, e.g. 22105 for 2.21.5; -1 when the library cannot tell. */
int srt_nccl_version(const srt_nccl_lib *lib)
{
    int v = 0;
    if (lib == NULL || lib->get_version(&v) != NCCL_SUCCESS || v <= 0)
        return -1;
    return v;
}

static int nccl_fail(srt_nccl_lib *lib, int rc, const char *what, srt_err *err)
{
    const char *s = lib->get_error_string(rc);
    return srt_err_set(err, "nccl: %s failed: %s (%d)", what, s ? s : "unknown error", rc);
}

int srt_nccl_get_unique_id(srt_nccl_lib *lib, unsigned char id[SRT_NCCL_UNIQUE_ID_BYTES],
                           srt_err *err)
{
    nccl_unique_id uid;
    int rc;

    if (lib == NULL || id == NULL)
        return srt_err_set(err, "nccl: no library or id buffer");
    rc = lib->get_unique_id(&uid);
    if (rc != NCCL_SUCCESS)
        return nccl_fail(lib, rc, "ncclGetUniqueId", err);
    memcpy(id, uid.internal, sizeof uid.internal);
    return SRT_OK;
}

static int nccl_all_reduce(srt_comm *base, float *buf, size_t n, srt_err *err)
{
    nccl_comm *c = (nccl_comm *)base;
    int rc = c->lib->all_reduce(buf, buf, n, NCCL_FLOAT32, NCCL_SUM, c->comm, c->stream);
    if (rc == NCCL_SUCCESS)
        return SRT_OK;
    c->failed = 1;
    return nccl_fail(c->lib, rc, "ncclAllReduce", err);
}

static int nccl_all_gather(srt_comm *base, const float *send, size_t n, float *recv, srt_err *err)
{
    nccl_comm *c = (nccl_comm *)base;
    int rc = c->lib->all_gather(send, recv, n, NCCL_FLOAT32, c->comm, c->stream);
    if (rc == NCCL_SUCCESS)
        return SRT_OK;
    c->failed = 1;
    return nccl_fail(c->lib, rc, "ncclAllGather", err);
}

static int nccl_broadcast(srt_comm *base, void *buf, size_t bytes, int root, srt_err *err)
{
    nccl_comm *c = (nccl_comm *)base;
    int rc;

    if (root < 0 || root >= base->size)
        return srt_err_set(err, "nccl: broadcast root %d outside 0..%d", root, base->size - 1);
    rc = c->lib->broadcast(buf, buf, bytes, NCCL_INT8, root, c->comm, c->stream);
    if (rc == NCCL_SUCCESS)
        return SRT_OK;
    c->failed = 1;
    return nccl_fail(c->lib, rc, "ncclBroadcast", err);
}

/* NCCL has no barrier; an all-reduce of one float on the stream serves. The caller synchronises
 * the stream when it needs host-side ordering. */
static int nccl_barrier(srt_comm *base, srt_err *err)
{
    (void)base;
    return srt_err_set(err, "nccl: barrier needs a device buffer; use a 1-element all-reduce");
}

/* After an error NCCL wants ncclCommAbort: ncclCommDestroy may wait for work that a dead peer
 * will never complete. */
static void nccl_destroy(srt_comm *base)
{
    nccl_comm *c = (nccl_comm *)base;
    if (c->failed && c->lib->comm_abort)
        c->lib->comm_abort(c->comm);
    else
        c->lib->comm_destroy(c->comm);
    free(c);
}

static const srt_comm_ops nccl_ops = {
    .name = "nccl",
    .all_reduce_sum_f32 = nccl_all_reduce,
    .all_gather_f32 = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
};

srt_comm *srt_nccl_comm_init(srt_nccl_lib *lib, const unsigned char id[SRT_NCCL_UNIQUE_ID_BYTES],
                             int rank, int size, void *stream, srt_err *err)
{
    nccl_unique_id uid;
    nccl_comm *c;
    int rc;

    if (lib == NULL || id == NULL) {
        srt_err_set(err, "nccl: no library or unique id");
        return NULL;
    }
    if (size < 1) {
        srt_err_set(err, "nccl: group size %d (must be at least 1)", size);
        return NULL;
    }
    if (rank < 0 || rank >= size) {
        srt_err_set(err, "nccl: rank %d outside 0..%d", rank, size - 1);
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        srt_err_set(err, "nccl: out of memory");
        return NULL;
    }
    memcpy(uid.internal, id, sizeof uid.internal);
    rc = lib->comm_init_rank(&c->comm, size, uid, rank);
    if (rc != NCCL_SUCCESS) {
        nccl_fail(lib, rc, "ncclCommInitRank", err);
        free(c);
        return NULL;
    }
    c->base.ops = &nccl_ops;
    c->base.rank = rank;
    c->base.size = size;
    c->lib = lib;
    c->stream = stream;
    return &c->base;
}
