/* A stand-in for libnccl.so.2 so the NCCL communicator can be tested without a GPU.
 *
 * It exports the same C entry points with NCCL's ABI (ncclUniqueId is 128 bytes passed by value,
 * ncclComm_t an opaque pointer, results and enums with NCCL's numeric values) and nothing else.
 * "Device" buffers are host memory and the stream argument is ignored: every collective has
 * completed when it returns. Ranks are processes (or threads); they meet in a POSIX
 * shared-memory region whose name ncclGetUniqueId writes into the id. Reductions add in rank order
 * (((r0 + r1) + r2) + ...), so all ranks get bit-identical results, equal to the CPU
 * communicator's.
 *
 * Environment (read at each call, so a test may set it in one rank only):
 *   FAKE_NCCL_TIMEOUT_MS   how long init and collectives wait for peers (default 30000);
 *                          a peer that never comes is ncclRemoteError, not a hang
 *   FAKE_NCCL_CHUNK_BYTES  per-rank staging size in shared memory (default 1 MiB; larger
 *                          collectives are chunked); the creating rank's value wins
 *   FAKE_NCCL_FAIL         comma list of calls that fail: version, uniqueid, init, allreduce,
 *                          allgather, broadcast
 *   FAKE_NCCL_FAIL_RANK    only this rank fails (default: every rank)
 *   FAKE_NCCL_FAIL_AFTER   the first N matching calls on a communicator still succeed
 *   FAKE_NCCL_FAIL_CODE    the ncclResult_t returned (default 1, ncclUnhandledCudaError)
 *   FAKE_NCCL_TRACE        a file to which every communicator call (init, destroy, abort,
 *                          collectives) appends one line:
 *                          "<pid> <entry point> rank=<r> count=<n> rc=<result>"
 * A rank whose collective fails marks the communicator broken, so its peers get
 * ncclRemoteError at once instead of waiting; a dead or departed peer does the same, and so
 * does ncclCommAbort (NCCL's way to drop a communicator after an error).
 *
 * Built with -DFAKE_NCCL_OMIT_BROADCAST it lacks ncclBroadcast (a library missing a symbol). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

/* ---- NCCL's ABI ---- */
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclTimeout = 8,
    ncclNumResults = 9
} ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum {
    ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3,
    ncclInt64 = 4, ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9, ncclNumTypes = 10
} ncclDataType_t;
typedef void *cudaStream_t;

#define FAKE_VERSION     22105   /* reported as NCCL 2.21.5 */
#define ID_MAGIC         "FAKENCCL"
#define REGION_MAGIC     0x464b4e43u
#define MAX_RANKS        512
#define DEFAULT_CHUNK    (1u << 20)
#define DEFAULT_TIMEOUT  30000

enum { OP_ALLREDUCE = 1, OP_ALLGATHER, OP_BROADCAST };

/* One per rank, compared after the first barrier of each chunk: every rank must be in the same
 * collective with the same arguments, or all of them fail with ncclInvalidUsage. */
typedef struct {
    uint32_t kind, dtype;
    uint64_t count;
    int32_t  root, op;
    uint64_t seq;
} coll_desc;

typedef struct {
    _Atomic uint32_t magic;        /* set last by the creator */
    uint32_t         nranks;
    uint64_t         chunk;        /* bytes per rank slot */
    _Atomic uint32_t joined;
    _Atomic uint32_t bar_count;
    _Atomic uint32_t bar_gen;      /* futex word */
    _Atomic uint32_t broken;       /* 0, or the ncclResult_t every later call returns */
    char             why[160];     /* set once by whoever breaks the group */
    _Atomic uint32_t why_claimed;
} region_header;

/* Layout: header | pid[nranks] | left[nranks] | desc[nranks] | slot[nranks] (64-aligned). */
struct ncclComm {
    region_header    *h;
    size_t            map_bytes;
    int               rank, nranks;
    _Atomic int32_t  *pids;
    _Atomic uint32_t *left;
    coll_desc        *desc;
    unsigned char    *slots;
    uint64_t          seq;
    unsigned          calls[4];    /* per collective kind, for FAKE_NCCL_FAIL_AFTER */
};

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

static size_t layout(uint32_t nranks, uint64_t chunk, size_t *pids_off, size_t *left_off,
                     size_t *desc_off, size_t *slots_off)
{
    size_t off = align64(sizeof(region_header));
    *pids_off = off;
    off = align64(off + nranks * sizeof(int32_t));
    *left_off = off;
    off = align64(off + nranks * sizeof(uint32_t));
    *desc_off = off;
    off = align64(off + nranks * sizeof(coll_desc));
    *slots_off = off;
    return off + (size_t)nranks * chunk;
}

static long env_long(const char *name, long def)
{
    const char *s = getenv(name);
    char *end;
    long v;
    if (s == NULL || *s == 0)
        return def;
    v = strtol(s, &end, 10);
    return *end == 0 ? v : def;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Injected failure for `what` on this rank? (rank -1: before a communicator exists) */
static int should_fail(const char *what, int rank, unsigned *calls)
{
    const char *list = getenv("FAKE_NCCL_FAIL");
    size_t n = strlen(what);
    const char *p;
    long only_rank, after;

    if (list == NULL)
        return 0;
    for (p = list; (p = strstr(p, what)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            break;
    if (p == NULL)
        return 0;
    only_rank = env_long("FAKE_NCCL_FAIL_RANK", -1);
    if (only_rank >= 0 && rank >= 0 && only_rank != rank)
        return 0;
    after = env_long("FAKE_NCCL_FAIL_AFTER", 0);
    if (calls && (*calls)++ < (unsigned long)(after < 0 ? 0 : after))
        return 0;
    return 1;
}

static ncclResult_t fail_code(void)
{
    long c = env_long("FAKE_NCCL_FAIL_CODE", ncclUnhandledCudaError);
    return c > 0 && c < ncclNumResults ? (ncclResult_t)c : ncclUnhandledCudaError;
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait_ms(_Atomic uint32_t *addr, uint32_t expected, int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, expected, &ts, NULL, 0);
}

/* A peer that exited (or is a zombie nobody has reaped yet) will never arrive. */
static int pid_dead(pid_t pid)
{
    char path[64], buf[512];
    FILE *f;
    char *rp;
    size_t n;

    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;   /* no /proc: rely on kill() and the timeout */
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

static ncclResult_t break_group(struct ncclComm *c, ncclResult_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ncclResult_t break_group(struct ncclComm *c, ncclResult_t code, const char *fmt, ...)
{
    uint32_t zero = 0;
    region_header *h = c->h;
    if (atomic_compare_exchange_strong(&h->why_claimed, &zero, 1)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(h->why, sizeof h->why, fmt, ap);
        va_end(ap);
    }
    zero = 0;
    atomic_compare_exchange_strong(&h->broken, &zero, (uint32_t)code);
    futex_wake_all(&h->bar_gen);
    futex_wake_all(&h->joined);
    if (getenv("FAKE_NCCL_DEBUG"))
        fprintf(stderr, "fake nccl: rank %d: %s\n", c->rank, h->why);
    return code;
}

/* Waits (futex on *word) until done(c) holds; peers that died or left, a broken group and the
 * timeout end the wait with an error. */
static ncclResult_t wait_for(struct ncclComm *c, _Atomic uint32_t *word, uint32_t seen,
                             int (*done)(struct ncclComm *, uint32_t), const char *what)
{
    long timeout = env_long("FAKE_NCCL_TIMEOUT_MS", DEFAULT_TIMEOUT);
    int64_t deadline = now_ms() + (timeout > 0 ? timeout : DEFAULT_TIMEOUT);
    int64_t next_check = now_ms() + 50;

    for (;;) {
        ncclResult_t bad = ncclSuccess;
        uint32_t b, w = atomic_load(word);

        if (done(c, seen))
            return ncclSuccess;
        b = atomic_load(&c->h->broken);
        if (b != 0)
            bad = (ncclResult_t)b == ncclInvalidUsage ? ncclInvalidUsage : ncclRemoteError;
        if (bad == ncclSuccess && now_ms() >= next_check) {   /* peers: every 50 ms at most */
            for (int r = 0; r < c->nranks && bad == ncclSuccess; r++) {
                pid_t p = atomic_load(&c->pids[r]);
                if (r == c->rank)
                    continue;
                /* a peer leaves or dies after this wait's condition became true for it, or it
                 * never will: look at the condition once more before calling it an error */
                if (atomic_load(&c->left[r]) && !done(c, seen))
                    bad = break_group(c, ncclRemoteError,
                                      "%s: rank %d destroyed its communicator", what, r);
                else if (pid_dead(p) && !done(c, seen))
                    bad = break_group(c, ncclRemoteError, "%s: rank %d (pid %d) died", what, r,
                                      (int)p);
            }
            if (bad == ncclSuccess && now_ms() >= deadline && !done(c, seen))
                bad = break_group(c, ncclRemoteError, "%s: peers did not arrive within %ld ms",
                                  what, timeout);
            next_check = now_ms() + 50;
        }
        if (bad != ncclSuccess)
            return done(c, seen) ? ncclSuccess : bad;
        futex_wait_ms(word, w, 50);
    }
}

static int gen_moved(struct ncclComm *c, uint32_t gen) { return atomic_load(&c->h->bar_gen) != gen; }
static int all_joined(struct ncclComm *c, uint32_t unused)
{
    (void)unused;
    return atomic_load(&c->h->joined) >= (uint32_t)c->nranks;
}

/* Sense-reversing barrier: the last rank to arrive resets the count, then moves the generation. */
static ncclResult_t barrier(struct ncclComm *c, const char *what)
{
    region_header *h = c->h;
    uint32_t gen;

    if (atomic_load(&h->broken))
        return ncclRemoteError;
    gen = atomic_load(&h->bar_gen);
    if (atomic_fetch_add(&h->bar_count, 1) + 1 == (uint32_t)c->nranks) {
        atomic_store(&h->bar_count, 0);
        atomic_fetch_add(&h->bar_gen, 1);
        futex_wake_all(&h->bar_gen);
        return ncclSuccess;
    }
    return wait_for(c, &h->bar_gen, gen, gen_moved, what);
}

/* ---- entry points ---- */

API const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:            return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (fake nccl)";
    case ncclSystemError:        return "unhandled system error (fake nccl)";
    case ncclInternalError:      return "internal error (fake nccl)";
    case ncclInvalidArgument:    return "invalid argument (fake nccl)";
    case ncclInvalidUsage:       return "invalid usage (fake nccl)";
    case ncclRemoteError:        return "remote process exited or there was a network error (fake nccl)";
    case ncclInProgress:         return "operation in progress (fake nccl)";
    case ncclTimeout:            return "operation timed out (fake nccl)";
    default:                     return "unknown result code (fake nccl)";
    }
}

API ncclResult_t ncclGetVersion(int *version)
{
    if (version == NULL)
        return ncclInvalidArgument;
    if (should_fail("version", -1, NULL))
        return fail_code();
    *version = FAKE_VERSION;
    return ncclSuccess;
}

API ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    uint64_t nonce[2];

    if (id == NULL)
        return ncclInvalidArgument;
    if (should_fail("uniqueid", -1, NULL))
        return fail_code();
    if (getrandom(nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        return ncclSystemError;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, ID_MAGIC, 8);
    snprintf(id->internal + 8, sizeof id->internal - 8, "/fake-nccl-%d-%016llx%016llx",
             (int)getpid(), (unsigned long long)nonce[0], (unsigned long long)nonce[1]);
    return ncclSuccess;
}

static void unmap(struct ncclComm *c)
{
    munmap(c->h, c->map_bytes);
    free(c);
}

/* Opens the region named by the id: the first rank creates and sizes it; the others wait for
 * the creator to finish (it publishes the magic last). */
static ncclResult_t open_region(const char *name, int nranks, struct ncclComm *c)
{
    long chunk_env = env_long("FAKE_NCCL_CHUNK_BYTES", DEFAULT_CHUNK);
    uint64_t chunk = chunk_env < 64 ? 64 : (uint64_t)chunk_env & ~(uint64_t)15;
    size_t po, lo, dof, so, total = layout((uint32_t)nranks, chunk, &po, &lo, &dof, &so);
    long timeout = env_long("FAKE_NCCL_TIMEOUT_MS", DEFAULT_TIMEOUT);
    int64_t deadline = now_ms() + (timeout > 0 ? timeout : DEFAULT_TIMEOUT);
    region_header *h;
    struct stat st;
    int fd;

    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)total) != 0) {
            close(fd);
            shm_unlink(name);
            return ncclSystemError;
        }
        h = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (h == MAP_FAILED) {
            shm_unlink(name);
            return ncclSystemError;
        }
        h->nranks = (uint32_t)nranks;
        h->chunk = chunk;
        atomic_store(&h->magic, REGION_MAGIC);
    } else {
        if (errno != EEXIST)
            return ncclSystemError;
        fd = shm_open(name, O_RDWR, 0600);
        if (fd < 0)   /* everybody already joined and the name is gone: this rank is extra */
            return errno == ENOENT ? ncclInvalidUsage : ncclSystemError;
        for (;;) {   /* the creator sizes the region right after creating it */
            if (fstat(fd, &st) != 0) {
                close(fd);
                return ncclSystemError;
            }
            if (st.st_size >= (off_t)sizeof(region_header))
                break;
            if (now_ms() >= deadline) {
                close(fd);
                return ncclRemoteError;
            }
            usleep(1000);
        }
        total = (size_t)st.st_size;
        h = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (h == MAP_FAILED)
            return ncclSystemError;
        while (atomic_load(&h->magic) != REGION_MAGIC) {
            if (now_ms() >= deadline) {
                munmap(h, total);
                return ncclRemoteError;
            }
            usleep(1000);
        }
        if (h->nranks != (uint32_t)nranks ||
            layout(h->nranks, h->chunk, &po, &lo, &dof, &so) != total) {
            munmap(h, total);
            return ncclInvalidArgument;   /* ranks disagree on the communicator's size */
        }
    }
    c->h = h;
    c->map_bytes = total;
    c->pids = (_Atomic int32_t *)((char *)h + po);
    c->left = (_Atomic uint32_t *)((char *)h + lo);
    c->desc = (coll_desc *)((char *)h + dof);
    c->slots = (unsigned char *)h + so;
    return ncclSuccess;
}

static ncclResult_t comm_init_rank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    char name[sizeof commId.internal];
    struct ncclComm *c;
    ncclResult_t rc;
    int32_t zero = 0;

    if (comm == NULL || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    *comm = NULL;
    if (memcmp(commId.internal, ID_MAGIC, 8) != 0 ||
        memchr(commId.internal + 8, 0, sizeof commId.internal - 8) == NULL)
        return ncclInvalidArgument;   /* not an id from ncclGetUniqueId */
    memcpy(name, commId.internal + 8, sizeof commId.internal - 8);
    if (name[0] != '/' || strchr(name + 1, '/') != NULL)
        return ncclInvalidArgument;
    if (should_fail("init", rank, NULL))
        return fail_code();
    c = calloc(1, sizeof *c);
    if (c == NULL)
        return ncclSystemError;
    c->rank = rank;
    c->nranks = nranks;
    rc = open_region(name, nranks, c);
    if (rc != ncclSuccess) {
        free(c);
        return rc;
    }
    if (!atomic_compare_exchange_strong(&c->pids[rank], &zero, (int32_t)getpid())) {
        unmap(c);
        return ncclInvalidUsage;   /* two processes claim the same rank */
    }
    if (atomic_fetch_add(&c->h->joined, 1) + 1 == (uint32_t)nranks) {
        shm_unlink(name);   /* complete: the mapping lives on, the name is not needed */
        futex_wake_all(&c->h->joined);
    } else {
        rc = wait_for(c, &c->h->joined, 0, all_joined, "ncclCommInitRank");
        if (rc != ncclSuccess) {
            shm_unlink(name);   /* nobody else may join a group that gave up */
            atomic_store(&c->left[rank], 1);
            unmap(c);
            return rc;
        }
    }
    *comm = c;
    return ncclSuccess;
}

/* Destroy leaves quietly; abort also breaks the group, so peers stop waiting for this rank. */
static ncclResult_t comm_leave(ncclComm_t comm, int abort_group)
{
    if (comm == NULL)
        return ncclInvalidArgument;
    if (abort_group)
        break_group(comm, ncclRemoteError, "rank %d aborted its communicator", comm->rank);
    atomic_store(&comm->left[comm->rank], 1);
    futex_wake_all(&comm->h->bar_gen);
    unmap(comm);
    return ncclSuccess;
}

static size_t dtype_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* Common entry of every collective: argument checks, injected failures, broken groups. */
static ncclResult_t begin(struct ncclComm *c, int kind, const char *fail_name, size_t count,
                          ncclDataType_t dtype, size_t *bytes)
{
    size_t es = dtype_size(dtype);

    if (c == NULL || es == 0)
        return ncclInvalidArgument;
    if (count > SIZE_MAX / es / (size_t)c->nranks)
        return ncclInvalidArgument;
    *bytes = count * es;
    if (should_fail(fail_name, c->rank, &c->calls[kind])) {
        ncclResult_t code = fail_code();
        break_group(c, code, "injected failure of %s on rank %d", fail_name, c->rank);
        return code;
    }
    if (atomic_load(&c->h->broken))
        return ncclRemoteError;
    if (*bytes)   /* an empty collective is local in NCCL: ranks may skip it */
        c->seq++;
    return ncclSuccess;
}

/* Publishes this rank's view of the collective, meets the others, and checks they agree. */
static ncclResult_t meet(struct ncclComm *c, int kind, size_t count, ncclDataType_t dtype, int root,
                         int op, const char *what)
{
    coll_desc mine = { (uint32_t)kind, (uint32_t)dtype, count, root, op, c->seq };
    ncclResult_t rc;

    c->desc[c->rank] = mine;
    rc = barrier(c, what);
    if (rc != ncclSuccess)
        return rc;
    for (int r = 0; r < c->nranks; r++)
        if (memcmp(&c->desc[r], &mine, sizeof mine) != 0)
            return break_group(c, ncclInvalidUsage,
                               "%s: rank %d is in a different collective or has other arguments",
                               what, r);
    /* a peer that saw a mismatch first may already be rewriting its descriptor */
    if (atomic_load(&c->h->broken))
        return ncclInvalidUsage;
    return ncclSuccess;
}

#define SUM_LOOP(T)                                                                          \
    do {                                                                                     \
        T *out = (T *)dst;                                                                   \
        for (size_t i = 0; i < n; i++) {                                                     \
            T s = ((const T *)c->slots)[i];                                                  \
            for (int r = 1; r < c->nranks; r++)                                              \
                s += ((const T *)(c->slots + (size_t)r * stride))[i];                        \
            out[i] = s;                                                                      \
        }                                                                                    \
    } while (0)

static void sum_slots(struct ncclComm *c, ncclDataType_t dtype, void *dst, size_t n)
{
    size_t stride = c->h->chunk;
    switch (dtype) {
    case ncclInt8:    SUM_LOOP(int8_t); break;
    case ncclUint8:   SUM_LOOP(uint8_t); break;
    case ncclInt32:   SUM_LOOP(int32_t); break;
    case ncclUint32:  SUM_LOOP(uint32_t); break;
    case ncclInt64:   SUM_LOOP(int64_t); break;
    case ncclUint64:  SUM_LOOP(uint64_t); break;
    case ncclFloat32: SUM_LOOP(float); break;
    case ncclFloat64: SUM_LOOP(double); break;
    default: break;
    }
}

static ncclResult_t all_reduce(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    size_t bytes, es = dtype_size(datatype);
    ncclResult_t rc;

    (void)stream;
    if (op != ncclSum || datatype == ncclFloat16 || datatype == ncclBfloat16)
        return ncclInvalidArgument;   /* only what the engine uses */
    rc = begin(comm, OP_ALLREDUCE, "allreduce", count, datatype, &bytes);
    if (rc != ncclSuccess || bytes == 0)
        return rc;
    if (sendbuff == NULL || recvbuff == NULL)
        return ncclInvalidArgument;
    for (size_t off = 0; off < bytes; off += comm->h->chunk) {
        size_t len = bytes - off < comm->h->chunk ? bytes - off : comm->h->chunk;
        memcpy(comm->slots + (size_t)comm->rank * comm->h->chunk, (const char *)sendbuff + off, len);
        rc = meet(comm, OP_ALLREDUCE, count, datatype, -1, op, "ncclAllReduce");
        if (rc != ncclSuccess)
            return rc;
        sum_slots(comm, datatype, (char *)recvbuff + off, len / es);
        rc = barrier(comm, "ncclAllReduce");   /* nobody refills a slot still being read */
        if (rc != ncclSuccess)
            return rc;
    }
    return ncclSuccess;
}

/* In place when sendbuff == recvbuff + rank * count. */
static ncclResult_t all_gather(const void *sendbuff, void *recvbuff, size_t sendcount,
                               ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    size_t bytes;
    ncclResult_t rc;

    (void)stream;
    rc = begin(comm, OP_ALLGATHER, "allgather", sendcount, datatype, &bytes);
    if (rc != ncclSuccess || bytes == 0)
        return rc;
    if (sendbuff == NULL || recvbuff == NULL)
        return ncclInvalidArgument;
    for (size_t off = 0; off < bytes; off += comm->h->chunk) {
        size_t len = bytes - off < comm->h->chunk ? bytes - off : comm->h->chunk;
        memcpy(comm->slots + (size_t)comm->rank * comm->h->chunk, (const char *)sendbuff + off, len);
        rc = meet(comm, OP_ALLGATHER, sendcount, datatype, -1, -1, "ncclAllGather");
        if (rc != ncclSuccess)
            return rc;
        for (int r = 0; r < comm->nranks; r++)
            memmove((char *)recvbuff + (size_t)r * bytes + off,
                    comm->slots + (size_t)r * comm->h->chunk, len);
        rc = barrier(comm, "ncclAllGather");
        if (rc != ncclSuccess)
            return rc;
    }
    return ncclSuccess;
}

/* In place when sendbuff == recvbuff; sendbuff matters only on the root. */
static ncclResult_t broadcast(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) __attribute__((unused));
static ncclResult_t broadcast(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream)
{
    size_t bytes;
    ncclResult_t rc;

    (void)stream;
    if (comm != NULL && (root < 0 || root >= comm->nranks))
        return ncclInvalidArgument;
    rc = begin(comm, OP_BROADCAST, "broadcast", count, datatype, &bytes);
    if (rc != ncclSuccess || bytes == 0)
        return rc;
    if (recvbuff == NULL || (comm->rank == root && sendbuff == NULL))
        return ncclInvalidArgument;
    for (size_t off = 0; off < bytes; off += comm->h->chunk) {
        size_t len = bytes - off < comm->h->chunk ? bytes - off : comm->h->chunk;
        unsigned char *slot = comm->slots + (size_t)root * comm->h->chunk;
        if (comm->rank == root)
            memcpy(slot, (const char *)sendbuff + off, len);
        rc = meet(comm, OP_BROADCAST, count, datatype, root, -1, "ncclBroadcast");
        if (rc != ncclSuccess)
            return rc;
        memmove((char *)recvbuff + off, slot, len);
        rc = barrier(comm, "ncclBroadcast");
        if (rc != ncclSuccess)
            return rc;
    }
    return ncclSuccess;
}

/* ---- exported entry points: the implementations above, traced ---- */

static void trace(const char *call, int rank, size_t count, ncclResult_t rc)
{
    const char *path = getenv("FAKE_NCCL_TRACE");
    char line[160];
    int fd, len;

    if (path == NULL || *path == 0)
        return;
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    len = snprintf(line, sizeof line, "%d %s rank=%d count=%zu rc=%d\n", (int)getpid(), call,
                   rank, count, (int)rc);
    if (write(fd, line, (size_t)len) < 0)   /* one write: lines of several ranks never mix */
        len = 0;
    close(fd);
}

static int rank_of(ncclComm_t comm) { return comm ? comm->rank : -1; }

API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    ncclResult_t rc = comm_init_rank(comm, nranks, commId, rank);
    trace("ncclCommInitRank", rank, (size_t)(nranks > 0 ? nranks : 0), rc);
    return rc;
}

API ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    int rank = rank_of(comm);
    ncclResult_t rc = comm_leave(comm, 0);
    trace("ncclCommDestroy", rank, 0, rc);
    return rc;
}

API ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    int rank = rank_of(comm);
    ncclResult_t rc = comm_leave(comm, 1);
    trace("ncclCommAbort", rank, 0, rc);
    return rc;
}

API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    ncclResult_t rc = all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
    trace("ncclAllReduce", rank_of(comm), count, rc);
    return rc;
}

API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                               ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    ncclResult_t rc = all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
    trace("ncclAllGather", rank_of(comm), sendcount, rc);
    return rc;
}

#ifndef FAKE_NCCL_OMIT_BROADCAST
API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream)
{
    ncclResult_t rc = broadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
    trace("ncclBroadcast", rank_of(comm), count, rc);
    return rc;
}
#endif
