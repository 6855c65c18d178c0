/* CPU communicator: ranks are processes sharing one memfd region.
 *
 * Layout: header | slot[0..size) of capacity floats | result of capacity floats.
 * A collective copies each rank's chunk into its slot, meets at a barrier, lets rank r reduce
 * segment r in rank order into the result, meets again, and copies the result back. One rank
 * computes each element, so all ranks see bit-identical sums. The barrier spins briefly, then
 * sleeps on a futex; it gives up with an error when a peer died or the group was aborted. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "srt/comm.h"

#define CPU_COMM_MAGIC     0x53525443u  /* "SRTC" */
#define CPU_COMM_MAX_RANKS 64

typedef struct group_header {
    uint32_t         magic;
    uint32_t         size;
    uint64_t         capacity;      /* floats per slot */
    uint64_t         map_bytes;
    _Atomic uint32_t arrived;
    _Atomic uint32_t generation;    /* futex word */
    _Atomic uint32_t broken;
    _Atomic int32_t  pids[CPU_COMM_MAX_RANKS];
} group_header;

struct srt_cpu_comm_group {
    int           fd;
    size_t        map_bytes;
    group_header *hdr;
};

typedef struct cpu_comm {
    srt_comm            base;
    srt_cpu_comm_group *group;
    int                 timeout_ms;
} cpu_comm;

static size_t header_bytes(void)
{
    return (sizeof(group_header) + 63) & ~(size_t)63;
}

static float *slot_ptr(group_header *h, int r)
{
    return (float *)((char *)h + header_bytes()) + (size_t)r * h->capacity;
}

static float *result_ptr(group_header *h)
{
    return slot_ptr(h, (int)h->size);
}

srt_cpu_comm_group *srt_cpu_comm_group_create(int size, size_t capacity_floats, srt_err *err)
{
    srt_cpu_comm_group *g;
    size_t bytes;
    int fd;

    if (size < 1 || size > CPU_COMM_MAX_RANKS) {
        srt_err_set(err, "cpu communicator: group size %d outside 1..%d", size, CPU_COMM_MAX_RANKS);
        return NULL;
    }
    if (capacity_floats < 1024)
        capacity_floats = 1024;
    bytes = header_bytes() + (size_t)(size + 1) * capacity_floats * sizeof(float);
    fd = memfd_create("srt-cpu-comm", MFD_CLOEXEC);
    if (fd < 0) {
        srt_err_set(err, "cpu communicator: memfd_create: %s", strerror(errno));
        return NULL;
    }
    if (ftruncate(fd, (off_t)bytes) != 0) {
        srt_err_set(err, "cpu communicator: ftruncate %zu bytes: %s", bytes, strerror(errno));
        close(fd);
        return NULL;
    }
    g = srt_cpu_comm_group_open_fd(fd, NULL);
    if (g == NULL) {
        srt_err_set(err, "cpu communicator: mmap of %zu bytes failed", bytes);
        close(fd);
        return NULL;
    }
    g->hdr->magic = CPU_COMM_MAGIC;
    g->hdr->size = (uint32_t)size;
    g->hdr->capacity = capacity_floats;
    g->hdr->map_bytes = bytes;
    return g;
}

srt_cpu_comm_group *srt_cpu_comm_group_open_fd(int fd, srt_err *err)
{
    srt_cpu_comm_group *g;
    struct stat st;
    void *p;

    if (fstat(fd, &st) != 0 || st.st_size < (off_t)header_bytes()) {
        srt_err_set(err, "cpu communicator: shared region fd %d is too small", fd);
        return NULL;
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        srt_err_set(err, "cpu communicator: mmap: %s", strerror(errno));
        return NULL;
    }
    g = calloc(1, sizeof *g);
    if (g == NULL) {
        munmap(p, (size_t)st.st_size);
        srt_err_set(err, "cpu communicator: out of memory");
        return NULL;
    }
    g->fd = fd;
    g->map_bytes = (size_t)st.st_size;
    g->hdr = p;
    return g;
}

void srt_cpu_comm_group_free(srt_cpu_comm_group *g)
{
    if (g == NULL)
        return;
    munmap(g->hdr, g->map_bytes);
    close(g->fd);
    free(g);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

void srt_cpu_comm_group_abort(srt_cpu_comm_group *g)
{
    atomic_store(&g->hdr->broken, 1);
    atomic_fetch_add(&g->hdr->generation, 1);
    futex_wake_all(&g->hdr->generation);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int peer_dead(group_header *h)
{
    for (uint32_t r = 0; r < h->size; r++) {
        int32_t pid = atomic_load(&h->pids[r]);
        if (pid <= 0)
            continue;
        if (kill(pid, 0) != 0 && errno == ESRCH)
            return (int)r;
        /* a dead child of ours is a zombie until reaped, and kill() still reaches it */
        siginfo_t si;
        si.si_pid = 0;
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
            return (int)r;
    }
    return -1;
}

static int group_barrier(cpu_comm *c, srt_err *err)
{
    group_header *h = c->group->hdr;
    uint32_t gen = atomic_load(&h->generation);
    int64_t deadline;
    int spins = 0, dead;

    if (atomic_load(&h->broken))
        return srt_err_set(err, "cpu communicator: group is broken (a rank died or aborted)");
    if (atomic_fetch_add(&h->arrived, 1) == h->size - 1) {
        atomic_store(&h->arrived, 0);
        atomic_fetch_add(&h->generation, 1);
        futex_wake_all(&h->generation);
        return SRT_OK;
    }
    deadline = now_ms() + c->timeout_ms;
    while (atomic_load(&h->generation) == gen) {
        if (++spins < 2000) {
            __builtin_ia32_pause();
            continue;
        }
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        syscall(SYS_futex, &h->generation, FUTEX_WAIT, gen, &ts, NULL, 0);
        if (atomic_load(&h->generation) != gen)
            break;
        dead = peer_dead(h);
        if (dead >= 0 || now_ms() > deadline) {
            srt_cpu_comm_group_abort(c->group);
            if (dead >= 0)
                return srt_err_set(err, "cpu communicator: rank %d (pid %d) died", dead,
                                   (int)atomic_load(&h->pids[dead]));
            return srt_err_set(err, "cpu communicator: peers did not arrive within %d ms",
                               c->timeout_ms);
        }
    }
    if (atomic_load(&h->broken))
        return srt_err_set(err, "cpu communicator: group is broken (a rank died or aborted)");
    return SRT_OK;
}

static int cpu_all_reduce(srt_comm *base, float *buf, size_t n, srt_err *err)
{
    cpu_comm *c = (cpu_comm *)base;
    group_header *h = c->group->hdr;
    size_t size = h->size;

    for (size_t off = 0; off < n; off += h->capacity) {
        size_t len = n - off < h->capacity ? n - off : h->capacity;
        size_t seg = (len + size - 1) / size;
        size_t lo = (size_t)base->rank * seg, hi = lo + seg > len ? len : lo + seg;

        memcpy(slot_ptr(h, base->rank), buf + off, len * sizeof(float));
        if (group_barrier(c, err) != SRT_OK)
            return SRT_ERROR;
        float *res = result_ptr(h);
        for (size_t i = lo; i < hi; i++) {
            float s = slot_ptr(h, 0)[i];
            for (size_t r = 1; r < size; r++)
                s += slot_ptr(h, (int)r)[i];
            res[i] = s;
        }
        if (group_barrier(c, err) != SRT_OK)
            return SRT_ERROR;
        memcpy(buf + off, res, len * sizeof(float));
    }
    return SRT_OK;
}

static int cpu_all_gather(srt_comm *base, const float *send, size_t n, float *recv, srt_err *err)
{
    cpu_comm *c = (cpu_comm *)base;
    group_header *h = c->group->hdr;

    for (size_t off = 0; off < n; off += h->capacity) {
        size_t len = n - off < h->capacity ? n - off : h->capacity;
        memcpy(slot_ptr(h, base->rank), send + off, len * sizeof(float));
        if (group_barrier(c, err) != SRT_OK)
            return SRT_ERROR;
        for (int r = 0; r < base->size; r++)
            memcpy(recv + (size_t)r * n + off, slot_ptr(h, r), len * sizeof(float));
        if (group_barrier(c, err) != SRT_OK)
            return SRT_ERROR;
    }
    return SRT_OK;
}

static int cpu_broadcast(srt_comm *base, void *buf, size_t bytes, int root, srt_err *err)
{
    cpu_comm *c = (cpu_comm *)base;
    group_header *h = c->group->hdr;
    size_t cap = h->capacity * sizeof(float);

    if (root < 0 || root >= base->size)
        return srt_err_set(err, "cpu communicator: broadcast root %d outside 0..%d", root,
                           base->size - 1);
    /* through the root's slot, not the result area: a rank leaving an all-reduce still copies
     * the result out after its last barrier, while the root may already be here */
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += cap) {
        size_t len = bytes - off < cap ? bytes - off : cap;
        if (base->rank == root)
            memcpy(slot_ptr(h, root), (char *)buf + off, len);
        if (group_barrier(c, err) != SRT_OK)
            return SRT_ERROR;
        if (base->rank != root)
            memcpy((char *)buf + off, slot_ptr(h, root), len);
        if (group_barrier(c, err) != SRT_OK)
            return SRT_ERROR;
        if (bytes == 0)
            break;
    }
    return SRT_OK;
}

static int cpu_barrier(srt_comm *base, srt_err *err)
{
    return group_barrier((cpu_comm *)base, err);
}

static void cpu_destroy(srt_comm *base)
{
    free(base);
}

static const srt_comm_ops cpu_ops = {
    .name = "cpu",
    .all_reduce_sum_f32 = cpu_all_reduce,
    .all_gather_f32 = cpu_all_gather,
    .broadcast = cpu_broadcast,
    .barrier = cpu_barrier,
    .destroy = cpu_destroy,
};

srt_comm *srt_cpu_comm_join(srt_cpu_comm_group *g, int rank, srt_err *err)
{
    cpu_comm *c;

    if (g->hdr->magic != CPU_COMM_MAGIC) {
        srt_err_set(err, "cpu communicator: shared region is not a communicator group");
        return NULL;
    }
    if (rank < 0 || rank >= (int)g->hdr->size) {
        srt_err_set(err, "cpu communicator: rank %d outside 0..%u", rank, g->hdr->size - 1);
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        srt_err_set(err, "cpu communicator: out of memory");
        return NULL;
    }
    c->base.ops = &cpu_ops;
    c->base.rank = rank;
    c->base.size = (int)g->hdr->size;
    c->group = g;
    c->timeout_ms = 60000;
    atomic_store(&g->hdr->pids[rank], (int32_t)getpid());
    return &c->base;
}

void srt_cpu_comm_set_timeout_ms(srt_comm *c, int ms)
{
    ((cpu_comm *)c)->timeout_ms = ms > 0 ? ms : 1;
}
