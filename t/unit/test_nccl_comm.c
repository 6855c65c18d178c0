/* The NCCL communicator (src/comm/nccl_comm.c) driven through a fake libnccl.so.2
 * (t/unit/fake_nccl: NCCL's C ABI over shared memory, host buffers, forked ranks).
 *
 * Ranks are forked processes, as in the scheduler. Results are checked against a plain
 * reference (sums in rank order, so bit-identical) and against the CPU communicator on the same
 * inputs. Error paths: missing library, missing symbol, injected NCCL failures (the message
 * carries NCCL's own error string), a peer that never joins, a peer that dies, ranks that call
 * different collectives. Every child has an alarm, so a hang is a failure, not a stuck test. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "srt/comm.h"
#include "tap.h"

#ifndef FAKE_NCCL_DIR
#define FAKE_NCCL_DIR "build/lib"
#endif
#define FAKE       FAKE_NCCL_DIR "/libfake_nccl.so"
#define FAKE_NOSYM FAKE_NCCL_DIR "/libfake_nccl_nosym.so"

#define MAX_RANKS 8

static const char *(*nccl_error_string)(int);   /* the fake's own, to check messages carry it */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Values with many mantissa bits, so a different summation order would show. */
static float value_of(int rank, size_t i, int iter)
{
    return sinf((float)(i * 7 + 1) * 0.37f + (float)rank + (float)iter * 0.013f) *
           (1.0f + (float)rank * 1e-3f) * (iter % 3 == 2 ? 1e4f : 1.0f);
}

/* Diagnostics of several lines, each one a TAP comment. */
static void diag_lines(const char *text)
{
    const char *p = text, *nl;
    while (*p) {
        nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (len > 0)
            tap_diag("  %.*s", len, p);
        p += len + (nl != NULL);
    }
}

/* The fake's regions for ids this process made (other tests may run at the same time). */
static int fake_shm_count(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    char prefix[64];
    int n = 0, len = snprintf(prefix, sizeof prefix, "fake-nccl-%d-", (int)getpid());
    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, (size_t)len) == 0;
    closedir(d);
    return n;
}

/* FAKE_NCCL_TRACE: the fake appends one line per call to this file. */
static char trace_path[64];

static void trace_start(void)
{
    snprintf(trace_path, sizeof trace_path, "/tmp/test_nccl_comm.%d.trace", (int)getpid());
    unlink(trace_path);
    setenv("FAKE_NCCL_TRACE", trace_path, 1);
}

/* Lines of the trace holding every one of the (up to two) strings. */
static int trace_count(const char *a, const char *b)
{
    FILE *f = fopen(trace_path, "r");
    char line[256];
    int n = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, a) != NULL && (b == NULL || strstr(line, b) != NULL);
    fclose(f);
    return n;
}

static void trace_stop(void)
{
    unsetenv("FAKE_NCCL_TRACE");
    unlink(trace_path);
}

/* ---- a group of forked ranks ---- */

typedef struct {
    srt_nccl_lib       *lib;
    unsigned char       id[SRT_NCCL_UNIQUE_ID_BYTES];
    srt_cpu_comm_group *cpu;   /* same inputs through the CPU communicator, when set */
    int                 size;
    int                 iters;
    size_t              n;
    int                 err_pipe;   /* a failing rank writes its message here */
} group;

typedef int (*rank_fn)(group *g, int rank);

static void report(group *g, int rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(group *g, int rank, const char *fmt, ...)
{
    char msg[1400];
    int len = snprintf(msg, sizeof msg, "rank %d: ", rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + len, sizeof msg - (size_t)len, fmt, ap);
    va_end(ap);
    len = (int)strlen(msg);
    msg[len++] = '\n';
    if (write(g->err_pipe, msg, (size_t)len) < 0)
        return;
}

/* Forks g->size ranks running fn; returns how many exited 0 and puts their statuses in st. */
static int run_ranks(group *g, rank_fn fn, int nforked, int st[MAX_RANKS], char *errs, size_t errs_len)
{
    int pfd[2], good = 0;
    pid_t pids[MAX_RANKS];
    size_t got = 0;
    ssize_t r;

    if (pipe(pfd) != 0)
        return 0;
    g->err_pipe = pfd[1];
    fflush(stdout);
    for (int i = 0; i < nforked; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(pfd[0]);
            alarm(60);
            _exit(fn(g, i));
        }
    }
    close(pfd[1]);
    while (got + 1 < errs_len && (r = read(pfd[0], errs + got, errs_len - 1 - got)) > 0)
        got += (size_t)r;
    errs[got] = 0;
    close(pfd[0]);
    for (int i = 0; i < nforked; i++) {
        waitpid(pids[i], &st[i], 0);
        good += WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0;
    }
    return good;
}

static int setup_group(group *g, srt_nccl_lib *lib, int size, size_t n, int iters, int with_cpu)
{
    srt_err err;
    memset(g, 0, sizeof *g);
    g->lib = lib;
    g->size = size;
    g->n = n;
    g->iters = iters;
    if (srt_nccl_get_unique_id(lib, g->id, &err) != SRT_OK) {
        tap_diag("unique id: %s", err.msg);
        return SRT_ERROR;
    }
    if (with_cpu) {
        g->cpu = srt_cpu_comm_group_create(size, 4096, &err);
        if (g->cpu == NULL) {
            tap_diag("cpu group: %s", err.msg);
            return SRT_ERROR;
        }
    }
    return SRT_OK;
}

/* ---- correct results ---- */

static int check_all_reduce(group *g, int rank, srt_comm *c, srt_comm *cpu, size_t n, int iter)
{
    srt_err err;
    float *buf = malloc((n ? n : 1) * sizeof *buf), *cbuf = malloc((n ? n : 1) * sizeof *cbuf);
    int bad = 0;

    for (size_t i = 0; i < n; i++)
        buf[i] = cbuf[i] = value_of(rank, i, iter);
    if (srt_comm_all_reduce_sum_f32(c, buf, n, &err) != SRT_OK) {
        report(g, rank, "all_reduce n=%zu iter %d: %s", n, iter, err.msg);
        bad = 1;
    }
    for (size_t i = 0; i < n && !bad; i++) {
        float want = value_of(0, i, iter);
        for (int r = 1; r < g->size; r++)
            want += value_of(r, i, iter);
        if (memcmp(&want, &buf[i], sizeof want) != 0) {
            report(g, rank, "all_reduce n=%zu iter %d: [%zu] = %.9g, want %.9g", n, iter, i,
                   (double)buf[i], (double)want);
            bad = 1;
        }
    }
    if (cpu && !bad) {
        if (srt_comm_all_reduce_sum_f32(cpu, cbuf, n, &err) != SRT_OK) {
            report(g, rank, "cpu all_reduce: %s", err.msg);
            bad = 1;
        } else if (n && memcmp(cbuf, buf, n * sizeof *buf) != 0) {
            report(g, rank, "all_reduce n=%zu iter %d differs from the CPU communicator", n, iter);
            bad = 1;
        }
    }
    free(buf);
    free(cbuf);
    return bad;
}

static int check_all_gather(group *g, int rank, srt_comm *c, srt_comm *cpu, size_t n, int iter)
{
    srt_err err;
    size_t total = n * (size_t)g->size;
    float *send = malloc((n ? n : 1) * sizeof *send);
    float *recv = malloc((total ? total : 1) * sizeof *recv);
    float *crecv = malloc((total ? total : 1) * sizeof *crecv);
    int bad = 0;

    for (size_t i = 0; i < n; i++)
        send[i] = value_of(rank, i, iter);
    for (size_t i = 0; i < total; i++)
        recv[i] = crecv[i] = NAN;
    if (srt_comm_all_gather_f32(c, send, n, recv, &err) != SRT_OK) {
        report(g, rank, "all_gather n=%zu: %s", n, err.msg);
        bad = 1;
    }
    for (int r = 0; r < g->size && !bad; r++)
        for (size_t i = 0; i < n && !bad; i++) {
            float want = value_of(r, i, iter);
            if (memcmp(&want, &recv[(size_t)r * n + i], sizeof want) != 0) {
                report(g, rank, "all_gather n=%zu iter %d: rank %d's [%zu] = %.9g, want %.9g", n,
                       iter, r, i, (double)recv[(size_t)r * n + i], (double)want);
                bad = 1;
            }
        }
    if (cpu && !bad) {
        if (srt_comm_all_gather_f32(cpu, send, n, crecv, &err) != SRT_OK) {
            report(g, rank, "cpu all_gather: %s", err.msg);
            bad = 1;
        } else if (total && memcmp(crecv, recv, total * sizeof *recv) != 0) {
            report(g, rank, "all_gather n=%zu differs from the CPU communicator", n);
            bad = 1;
        }
    }
    free(send);
    free(recv);
    free(crecv);
    return bad;
}

static unsigned char byte_of(int root, size_t i, int iter)
{
    return (unsigned char)((i * 131 + (size_t)root * 17 + (size_t)iter * 7) ^ (i >> 8));
}

static int check_broadcast(group *g, int rank, srt_comm *c, srt_comm *cpu, size_t bytes, int root,
                           int iter)
{
    srt_err err;
    unsigned char *buf = malloc(bytes ? bytes : 1), *cbuf = malloc(bytes ? bytes : 1);
    int bad = 0;

    for (size_t i = 0; i < bytes; i++)   /* non-roots hold garbage that must be overwritten */
        buf[i] = cbuf[i] = rank == root ? byte_of(root, i, iter) : (unsigned char)(0xA5 ^ rank);
    if (srt_comm_broadcast(c, buf, bytes, root, &err) != SRT_OK) {
        report(g, rank, "broadcast %zu bytes from %d: %s", bytes, root, err.msg);
        bad = 1;
    }
    for (size_t i = 0; i < bytes && !bad; i++)
        if (buf[i] != byte_of(root, i, iter)) {
            report(g, rank, "broadcast %zu bytes from %d: byte %zu is %u, want %u", bytes, root,
                   i, buf[i], byte_of(root, i, iter));
            bad = 1;
        }
    if (cpu && !bad) {
        if (srt_comm_broadcast(cpu, cbuf, bytes, root, &err) != SRT_OK) {
            report(g, rank, "cpu broadcast: %s", err.msg);
            bad = 1;
        } else if (bytes && memcmp(cbuf, buf, bytes) != 0) {
            report(g, rank, "broadcast differs from the CPU communicator");
            bad = 1;
        }
    }
    free(buf);
    free(cbuf);
    return bad;
}

static srt_comm *join(group *g, int rank, srt_comm **cpu)
{
    srt_err err;
    srt_comm *c = srt_nccl_comm_init(g->lib, g->id, rank, g->size, NULL, &err);

    if (c == NULL) {
        report(g, rank, "srt_nccl_comm_init: %s", err.msg);
        return NULL;
    }
    if (c->rank != rank || c->size != g->size || strcmp(c->ops->name, "nccl") != 0) {
        report(g, rank, "communicator says rank %d size %d name %s", c->rank, c->size,
               c->ops->name);
        srt_comm_destroy(c);
        return NULL;
    }
    *cpu = NULL;
    if (g->cpu) {
        *cpu = srt_cpu_comm_join(g->cpu, rank, &err);
        if (*cpu == NULL) {
            report(g, rank, "cpu join: %s", err.msg);
            srt_comm_destroy(c);
            return NULL;
        }
    }
    return c;
}

/* One of each collective at several sizes (0, 1, odd, larger than the fake's chunk), then
 * g->iters rounds of mixed collectives with changing inputs. */
static int rank_collectives(group *g, int rank)
{
    static const size_t sizes[] = { 0, 1, 7, 1000, 70001 };
    srt_comm *cpu, *c = join(g, rank, &cpu);
    srt_err err;
    int bad = 0;

    if (c == NULL)
        return 2;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && !bad; k++) {
        bad |= check_all_reduce(g, rank, c, cpu, sizes[k], 0);
        bad |= !bad && check_all_gather(g, rank, c, cpu, sizes[k], 1);
        for (int root = 0; root < g->size && !bad; root++)
            bad |= check_broadcast(g, rank, c, cpu, sizes[k] * 3 + 1, root, 2);
    }
    for (int it = 0; it < g->iters && !bad; it++) {
        switch (it % 3) {
        case 0: bad = check_all_reduce(g, rank, c, cpu, g->n + (size_t)(it % 5), it); break;
        case 1: bad = check_all_gather(g, rank, c, cpu, g->n / 2 + 1, it); break;
        default: bad = check_broadcast(g, rank, c, cpu, g->n * 2 + 3, it % g->size, it); break;
        }
    }
    if (!bad && srt_comm_barrier(c, &err) != SRT_ERROR) {
        report(g, rank, "barrier on an NCCL communicator should be refused (no device buffer)");
        bad = 1;
    }
    if (!bad && srt_comm_broadcast(c, &err, 1, g->size, &err) != SRT_ERROR) {
        report(g, rank, "broadcast from root %d (out of range) was accepted", g->size);
        bad = 1;
    }
    srt_comm_destroy(c);
    srt_comm_destroy(cpu);
    return bad ? 3 : 0;
}

static void collectives(srt_nccl_lib *lib, int size, size_t n, int iters, const char *chunk)
{
    group g;
    int st[MAX_RANKS], good;
    char errs[8192];
    double t0;

    if (chunk)
        setenv("FAKE_NCCL_CHUNK_BYTES", chunk, 1);
    trace_start();
    if (setup_group(&g, lib, size, n, iters, 1) != SRT_OK) {
        ok(0, "tp=%d: group set up", size);
        return;
    }
    t0 = now_s();
    good = run_ranks(&g, rank_collectives, size, st, errs, sizeof errs);
    ok(good == size && errs[0] == 0,
       "tp=%d: all_reduce (bit-identical to the rank-order reference and to the CPU "
       "communicator), all_gather, broadcast from every root; sizes 0..70001; %d mixed rounds%s "
       "(%.2f s)", size, iters, chunk ? ", fake staged in small chunks" : "", now_s() - t0);
    if (errs[0])
        diag_lines(errs);
    ok(trace_count("ncclCommInitRank", "rc=0") == size && trace_count("ncclCommDestroy", "rc=0") == size &&
       trace_count("ncclCommAbort", NULL) == 0 && trace_count("ncclAllReduce", "rc=0") > 0 &&
       trace_count("rc=", NULL) == trace_count("rc=0", NULL),
       "tp=%d: the library saw %d inits, %d all-reduces, every call successful, and plain "
       "destroys", size, trace_count("ncclCommInitRank", NULL), trace_count("ncclAllReduce", NULL));
    trace_stop();
    unsetenv("FAKE_NCCL_CHUNK_BYTES");
    srt_cpu_comm_group_free(g.cpu);
}

/* ---- NCCL's ABI straight from a second client: out-of-place and in-place variants the
 * communicator does not use, so the fake is held to what real NCCL does ---- */

typedef struct { char internal[128]; } raw_id;
static int (*raw_init)(void **, int, raw_id, int);
static int (*raw_all_reduce)(const void *, void *, size_t, int, int, void *, void *);
static int (*raw_all_gather)(const void *, void *, size_t, int, void *, void *);
static int (*raw_broadcast)(const void *, void *, size_t, int, int, void *, void *);
static int (*raw_destroy)(void *);

static int rank_raw(group *g, int rank)
{
    raw_id id;
    void *comm;
    int n = 33, size = g->size, rc;
    double in[33], out[33];
    float gat[33 * MAX_RANKS];
    int32_t bc[5] = { 0 }, bcsrc[5] = { 1, -2, 3, -4, 5 };

    memcpy(id.internal, g->id, sizeof id.internal);
    if ((rc = raw_init(&comm, size, id, rank)) != 0) {
        report(g, rank, "ncclCommInitRank: %d", rc);
        return 2;
    }
    /* an empty collective is local: rank 0 alone may issue one */
    if (rank == 0 && (rc = raw_all_reduce(in, out, 0, 8, 0, comm, NULL)) != 0) {
        report(g, rank, "ncclAllReduce of 0 elements: %d", rc);
        return 10;
    }
    /* out of place, float64 (ncclFloat64 = 8): recv gets the sum, send is untouched */
    for (int i = 0; i < n; i++)
        in[i] = (double)(rank + 1) * (i + 0.5);
    if ((rc = raw_all_reduce(in, out, (size_t)n, 8, 0, comm, NULL)) != 0) {
        report(g, rank, "ncclAllReduce f64: %d", rc);
        return 3;
    }
    for (int i = 0; i < n; i++)
        if (out[i] != (double)(size * (size + 1) / 2) * (i + 0.5) || in[i] != (rank + 1) * (i + 0.5)) {
            report(g, rank, "ncclAllReduce f64 out of place: [%d] = %g", i, out[i]);
            return 4;
        }
    /* in-place all-gather: sendbuff == recvbuff + rank * count */
    for (int i = 0; i < n * size; i++)
        gat[i] = -1.0f;
    for (int i = 0; i < n; i++)
        gat[rank * n + i] = (float)(rank * 1000 + i);
    if ((rc = raw_all_gather(gat + rank * n, gat, (size_t)n, 7, comm, NULL)) != 0) {
        report(g, rank, "ncclAllGather in place: %d", rc);
        return 5;
    }
    for (int i = 0; i < n * size; i++)
        if (gat[i] != (float)((i / n) * 1000 + i % n)) {
            report(g, rank, "ncclAllGather in place: [%d] = %g", i, (double)gat[i]);
            return 6;
        }
    /* out-of-place broadcast of int32 (ncclInt32 = 2) from the last rank */
    if ((rc = raw_broadcast(bcsrc, bc, 5, 2, size - 1, comm, NULL)) != 0) {
        report(g, rank, "ncclBroadcast out of place: %d", rc);
        return 7;
    }
    for (int i = 0; i < 5; i++)
        if (bc[i] != bcsrc[i]) {
            report(g, rank, "ncclBroadcast out of place: [%d] = %d", i, bc[i]);
            return 8;
        }
    /* invalid arguments are refused, not acted on */
    if (raw_all_reduce(in, out, 1, 42, 0, comm, NULL) != 4 ||
        raw_broadcast(bc, bc, 1, 2, size, comm, NULL) != 4) {
        report(g, rank, "bad datatype or root not refused with ncclInvalidArgument");
        return 9;
    }
    raw_destroy(comm);
    return 0;
}

static void raw_abi(srt_nccl_lib *lib)
{
    void *h = dlopen(FAKE, RTLD_NOW | RTLD_LOCAL);
    int st[MAX_RANKS];
    char errs[4096];
    group g;

    if (!ok(h != NULL, "fake NCCL opens with dlopen")) {
        tap_diag("%s", dlerror());
        return;
    }
    *(void **)&raw_init = dlsym(h, "ncclCommInitRank");
    *(void **)&raw_all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&raw_all_gather = dlsym(h, "ncclAllGather");
    *(void **)&raw_broadcast = dlsym(h, "ncclBroadcast");
    *(void **)&raw_destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&nccl_error_string = dlsym(h, "ncclGetErrorString");
    ok(dlsym(h, "break_group") == NULL && dlsym(h, "barrier") == NULL,
       "the fake exports NCCL's entry points only");
    for (int size = 1; size <= 3; size += 2) {
        if (setup_group(&g, lib, size, 0, 0, 0) != SRT_OK)
            return;
        ok(run_ranks(&g, rank_raw, size, st, errs, sizeof errs) == size && errs[0] == 0,
           "tp=%d, raw ABI: out-of-place f64 all-reduce, in-place all-gather, out-of-place "
           "int32 broadcast, invalid datatype/root refused, an empty all-reduce on one rank only",
           size);
        if (errs[0])
            diag_lines(errs);
    }
    /* keep h open: nccl_error_string is used below */
}

/* ---- error paths ---- */

static int rank_expect_fail(group *g, int rank)
{
    srt_comm *cpu, *c = join(g, rank, &cpu);
    srt_err err;
    float x[16] = { 1 };
    int rc = SRT_OK, i;

    if (c == NULL)
        return 2;
    /* FAKE_NCCL_FAIL_AFTER calls succeed first, then the op fails */
    for (i = 0; i < 10 && rc == SRT_OK; i++) {
        if (g->iters == 0)
            rc = srt_comm_all_reduce_sum_f32(c, x, 16, &err);
        else if (g->iters == 1)
            rc = srt_comm_all_gather_f32(c, x, 1, x + 8, &err);
        else if (g->iters == 2)
            rc = srt_comm_broadcast(c, x, sizeof x, 0, &err);
        else   /* ranks disagree on the collective */
            rc = rank == 0 ? srt_comm_all_reduce_sum_f32(c, x, 4, &err)
                           : srt_comm_all_gather_f32(c, x, 2, x + 8, &err);
    }
    if (rc == SRT_OK) {
        report(g, rank, "no collective failed");
        return 3;
    }
    report(g, rank, "call %d: %s", i, err.msg);
    /* a broken communicator stays broken: the next call fails too, at once */
    if (srt_comm_all_reduce_sum_f32(c, x, 1, &err) != SRT_ERROR) {
        report(g, rank, "a collective after the failure succeeded");
        return 4;
    }
    srt_comm_destroy(c);
    return 0;
}

/* Runs ranks that must each see one failing collective; returns their messages, one per line. */
static int failing_group(srt_nccl_lib *lib, int size, int which, char *errs, size_t len,
                         double *secs)
{
    group g;
    int st[MAX_RANKS], good;
    double t0 = now_s();

    if (setup_group(&g, lib, size, 0, which, 0) != SRT_OK)
        return 0;
    good = run_ranks(&g, rank_expect_fail, size, st, errs, len);
    *secs = now_s() - t0;
    return good == size;
}

static int line_count_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void injected_failures(srt_nccl_lib *lib)
{
    char errs[8192], want[256];
    double secs;
    int allok;

    /* all ranks fail the all-reduce: each message names the call and NCCL's string for it */
    setenv("FAKE_NCCL_FAIL", "allreduce", 1);
    trace_start();
    allok = failing_group(lib, 2, 0, errs, sizeof errs, &secs);
    ok(trace_count("ncclCommAbort rank=0", "rc=0") == 1 &&
       trace_count("ncclCommAbort rank=1", "rc=0") == 1 && trace_count("ncclCommDestroy", NULL) == 0,
       "a communicator that saw an error is dropped with ncclCommAbort, not ncclCommDestroy");
    trace_stop();
    snprintf(want, sizeof want, "ncclAllReduce failed: %s (1)", nccl_error_string(1));
    ok(allok && line_count_with(errs, want) == 2,
       "injected ncclAllReduce failure: SRT_ERROR on both ranks, message carries NCCL's error "
       "string \"%s\"", nccl_error_string(1));
    diag_lines(errs);

    /* only rank 1 fails, on its 4th all-gather: rank 0 learns at once (remote error) */
    setenv("FAKE_NCCL_FAIL", "allgather", 1);
    setenv("FAKE_NCCL_FAIL_RANK", "1", 1);
    setenv("FAKE_NCCL_FAIL_AFTER", "3", 1);
    setenv("FAKE_NCCL_FAIL_CODE", "2", 1);
    setenv("FAKE_NCCL_TIMEOUT_MS", "20000", 1);
    allok = failing_group(lib, 2, 1, errs, sizeof errs, &secs);
    snprintf(want, sizeof want, "rank 1: call 4: nccl: ncclAllGather failed: %s (2)",
             nccl_error_string(2));
    ok(allok && strstr(errs, want) != NULL && strstr(errs, "rank 0: call 4: nccl: ncclAllGather "
       "failed") != NULL && strstr(errs, nccl_error_string(6)) != NULL && secs < 10,
       "ncclAllGather failing on rank 1 after 3 good calls: rank 1 gets the injected error, "
       "rank 0 a remote error, without waiting for the timeout (%.2f s)", secs);
    diag_lines(errs);
    unsetenv("FAKE_NCCL_FAIL_RANK");
    unsetenv("FAKE_NCCL_FAIL_AFTER");
    unsetenv("FAKE_NCCL_FAIL_CODE");

    setenv("FAKE_NCCL_FAIL", "broadcast", 1);
    allok = failing_group(lib, 4, 2, errs, sizeof errs, &secs);
    ok(allok && line_count_with(errs, "ncclBroadcast failed") == 4,
       "injected ncclBroadcast failure at tp=4: SRT_ERROR on every rank");
    unsetenv("FAKE_NCCL_FAIL");

    /* ranks that call different collectives are caught, not silently mixed */
    allok = failing_group(lib, 2, 3, errs, sizeof errs, &secs);
    ok(allok && line_count_with(errs, nccl_error_string(5)) == 2,
       "rank 0 all-reduce against rank 1 all-gather: both fail with \"%s\"",
       nccl_error_string(5));
    diag_lines(errs);
    unsetenv("FAKE_NCCL_TIMEOUT_MS");
}

static void init_failures(srt_nccl_lib *lib)
{
    srt_err err;
    unsigned char id[SRT_NCCL_UNIQUE_ID_BYTES], zero[SRT_NCCL_UNIQUE_ID_BYTES] = { 0 };
    char want[256];
    srt_comm *c;

    setenv("FAKE_NCCL_FAIL", "uniqueid", 1);
    snprintf(want, sizeof want, "ncclGetUniqueId failed: %s", nccl_error_string(1));
    ok(srt_nccl_get_unique_id(lib, id, &err) == SRT_ERROR && strstr(err.msg, want),
       "injected ncclGetUniqueId failure: %s", err.msg);
    setenv("FAKE_NCCL_FAIL", "init", 1);
    srt_nccl_get_unique_id(lib, id, &err);
    c = srt_nccl_comm_init(lib, id, 0, 1, NULL, &err);
    snprintf(want, sizeof want, "ncclCommInitRank failed: %s", nccl_error_string(1));
    ok(c == NULL && strstr(err.msg, want), "injected ncclCommInitRank failure: %s", err.msg);
    setenv("FAKE_NCCL_FAIL", "version", 1);
    is_int(srt_nccl_version(lib), -1, "ncclGetVersion failing: srt_nccl_version is -1");
    unsetenv("FAKE_NCCL_FAIL");

    c = srt_nccl_comm_init(lib, zero, 0, 1, NULL, &err);
    ok(c == NULL && strstr(err.msg, nccl_error_string(4)),
       "an id that no ncclGetUniqueId made is refused: %s", err.msg);
    c = srt_nccl_comm_init(lib, id, 2, 2, NULL, &err);
    ok(c == NULL && strstr(err.msg, "rank 2"), "rank outside the group: %s", err.msg);
    c = srt_nccl_comm_init(lib, id, 0, 0, NULL, &err);
    ok(c == NULL && strstr(err.msg, "size 0"), "group of size 0 refused: %s", err.msg);
    c = srt_nccl_comm_init(NULL, id, 0, 1, NULL, &err);
    ok(c == NULL, "no library: %s", err.msg);
    ok(srt_nccl_get_unique_id(NULL, id, &err) == SRT_ERROR, "unique id without a library: %s",
       err.msg);
    is_int(srt_nccl_version(NULL), -1, "version without a library is -1");
}

/* A peer that never joins: init fails after FAKE_NCCL_TIMEOUT_MS instead of hanging. */
static int rank_lonely(group *g, int rank)
{
    srt_err err;
    double t0 = now_s();
    srt_comm *c = srt_nccl_comm_init(g->lib, g->id, rank, g->size, NULL, &err);
    if (c != NULL) {
        report(g, rank, "joined a group whose peer never came");
        return 2;
    }
    report(g, rank, "after %.2f s: %s", now_s() - t0, err.msg);
    return 0;
}

/* Joins, then one rank dies without taking part: the other's collective fails fast. */
static int rank_dies(group *g, int rank)
{
    srt_comm *cpu, *c = join(g, rank, &cpu);
    srt_err err;
    float x = 1;
    double t0 = now_s();

    if (c == NULL)
        return 2;
    if (rank == 1)
        _exit(0);   /* stays a zombie: nobody reaps it while rank 0 waits */
    if (srt_comm_all_reduce_sum_f32(c, &x, 1, &err) != SRT_ERROR) {
        report(g, rank, "all_reduce with a dead peer succeeded");
        return 3;
    }
    report(g, rank, "after %.2f s: %s", now_s() - t0, err.msg);
    srt_comm_destroy(c);
    return 0;
}

static void peers_missing(srt_nccl_lib *lib)
{
    group g;
    int st[MAX_RANKS], good, before = fake_shm_count();
    char errs[4096], want[256];
    double t0, secs;

    setenv("FAKE_NCCL_TIMEOUT_MS", "300", 1);
    setup_group(&g, lib, 2, 0, 0, 0);
    t0 = now_s();
    good = run_ranks(&g, rank_lonely, 1, st, errs, sizeof errs);   /* rank 1 never forked */
    secs = now_s() - t0;
    snprintf(want, sizeof want, "ncclCommInitRank failed: %s (6)", nccl_error_string(6));
    ok(good == 1 && strstr(errs, want) != NULL && secs >= 0.29 && secs < 5,
       "a peer that never joins: ncclCommInitRank gives up after the timeout (%.2f s)", secs);
    diag_lines(errs);
    is_int(fake_shm_count(), before, "the abandoned group's shared memory is unlinked");

    setenv("FAKE_NCCL_TIMEOUT_MS", "20000", 1);   /* death is noticed, not timed out */
    setup_group(&g, lib, 2, 0, 0, 0);
    t0 = now_s();
    good = run_ranks(&g, rank_dies, 2, st, errs, sizeof errs);
    secs = now_s() - t0;
    snprintf(want, sizeof want, "ncclAllReduce failed: %s (6)", nccl_error_string(6));
    ok(good == 2 && strstr(errs, want) != NULL && secs < 5,
       "a peer that dies: the survivor's all-reduce fails in %.2f s, well before the 20 s "
       "timeout", secs);
    diag_lines(errs);
    unsetenv("FAKE_NCCL_TIMEOUT_MS");
}

/* ---- loading ---- */

static srt_nccl_lib *loading(void)
{
    srt_err err;
    srt_nccl_lib *lib, *env_lib;
    unsigned char a[SRT_NCCL_UNIQUE_ID_BYTES], b[SRT_NCCL_UNIQUE_ID_BYTES];

    lib = srt_nccl_load("/nonexistent/libnccl.so.2", &err);
    ok(lib == NULL && strstr(err.msg, "\"/nonexistent/libnccl.so.2\""),
       "missing library: the error names the path: %s", err.msg);
    lib = srt_nccl_load(FAKE_NOSYM, &err);
    ok(lib == NULL && strstr(err.msg, FAKE_NOSYM) && strstr(err.msg, "ncclBroadcast"),
       "library without ncclBroadcast refused, naming path and symbol: %s", err.msg);

    setenv("SRT_NCCL_SO_PATH", "/nonexistent/env/libnccl.so", 1);
    lib = srt_nccl_load(NULL, &err);
    ok(lib == NULL && strstr(err.msg, "/nonexistent/env/libnccl.so") &&
       strstr(err.msg, "SRT_NCCL_SO_PATH"),
       "SRT_NCCL_SO_PATH naming a missing file: the error says where the path came from: %s",
       err.msg);
    setenv("SRT_NCCL_SO_PATH", FAKE, 1);
    env_lib = srt_nccl_load(NULL, &err);
    ok(env_lib != NULL, "SRT_NCCL_SO_PATH loads the fake NCCL%s%s", env_lib ? "" : ": ",
       env_lib ? "" : err.msg);
    is_int(env_lib ? srt_nccl_version(env_lib) : 0, 22105, "version through SRT_NCCL_SO_PATH");
    lib = srt_nccl_load(FAKE_NOSYM, &err);
    ok(lib == NULL, "an explicit path wins over SRT_NCCL_SO_PATH");
    unsetenv("SRT_NCCL_SO_PATH");
    srt_nccl_unload(env_lib);

    lib = srt_nccl_load(FAKE, &err);
    if (!ok(lib != NULL, "srt_nccl_load(\"%s\")", FAKE)) {
        tap_diag("%s", err.msg);
        return NULL;
    }
    is_int(srt_nccl_version(lib), 22105, "srt_nccl_version: the library's version code");
    ok(srt_nccl_get_unique_id(lib, a, &err) == SRT_OK &&
       srt_nccl_get_unique_id(lib, b, &err) == SRT_OK && memcmp(a, b, sizeof a) != 0,
       "two unique ids differ");
    return lib;
}

/* Many groups one after another leave nothing behind in /dev/shm. */
static void group_churn(srt_nccl_lib *lib)
{
    int before = fake_shm_count(), good_groups = 0, st[MAX_RANKS];
    char errs[2048];
    group g;

    for (int i = 0; i < 12; i++) {
        if (setup_group(&g, lib, 1 + i % 3, 5, 3, 0) != SRT_OK)
            break;
        good_groups += run_ranks(&g, rank_collectives, g.size, st, errs, sizeof errs) == g.size &&
                       errs[0] == 0;
    }
    is_int(good_groups, 12, "12 groups of 1..3 ranks created, used and destroyed in turn");
    is_int(fake_shm_count(), before, "no shared memory left behind by them");
}

/* Ranks as threads of one process (NCCL allows that too). */
typedef struct { group *g; int rank, rc; } thread_rank;

static void *thread_main(void *arg)
{
    thread_rank *t = arg;
    t->rc = rank_collectives(t->g, t->rank);
    return NULL;
}

static void thread_ranks(srt_nccl_lib *lib)
{
    group g;
    thread_rank t[3];
    pthread_t th[3];
    int pfd[2], good = 0;
    char errs[4096] = "";
    ssize_t r;

    if (setup_group(&g, lib, 3, 50, 30, 1) != SRT_OK || pipe(pfd) != 0)
        return;
    g.err_pipe = pfd[1];
    for (int i = 0; i < 3; i++) {
        t[i] = (thread_rank){ &g, i, -1 };
        pthread_create(&th[i], NULL, thread_main, &t[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        good += t[i].rc == 0;
    }
    close(pfd[1]);
    r = read(pfd[0], errs, sizeof errs - 1);
    errs[r > 0 ? r : 0] = 0;
    close(pfd[0]);
    ok(good == 3 && errs[0] == 0, "tp=3 with ranks as threads of one process: same results");
    diag_lines(errs);
    srt_cpu_comm_group_free(g.cpu);
}

/* The GPU stage's program (t/gpu/test_nccl.c) on host buffers against the fake, so the
 * program scripts/gpu-check runs on a GPU is itself known to work. */
static void gpu_program_on_fake(void)
{
#ifdef NCCL_GPU_TEST
    int pfd[2], st, oks = 0, plan = -1;
    char out[8192];
    size_t got = 0;
    ssize_t r;
    pid_t pid;

    if (pipe(pfd) != 0)
        return;
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        setenv("TEST_NCCL_HOST", "1", 1);
        setenv("SRT_NCCL_SO_PATH", FAKE, 1);
        alarm(60);
        execl(NCCL_GPU_TEST, NCCL_GPU_TEST, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    while (got + 1 < sizeof out && (r = read(pfd[0], out + got, sizeof out - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = 0;
    close(pfd[0]);
    waitpid(pid, &st, 0);
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        oks += strncmp(p, "ok ", 3) == 0;
        if (strncmp(p, "1..", 3) == 0)
            plan = atoi(p + 3);
    }
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && plan >= 9 && oks == plan,
       "the GPU stage's program (%s) passes on host buffers with the fake NCCL: %d of %d",
       NCCL_GPU_TEST, oks, plan);
    if (oks != plan || plan < 9)
        diag_lines(out);
#endif
}

/* The real libnccl.so.2 when the loader finds one (a CUDA toolkit install; a GPU is not
 * needed): its ABI through srt_nccl_* as far as a machine without a GPU allows. The init either
 * succeeds (a GPU is there) or fails with NCCL's own error string; it never crashes or hangs. */
static int rank_real_init(group *g, int rank)
{
    srt_err err;
    srt_comm *c = srt_nccl_comm_init(g->lib, g->id, rank, 1, NULL, &err);
    if (c != NULL) {
        report(g, rank, "initialised");
        srt_comm_destroy(c);
        return 0;
    }
    report(g, rank, "%s", err.msg);
    return 1;
}

static void real_nccl(void)
{
    srt_err err;
    srt_nccl_lib *lib;
    const char *(*real_error_string)(int);
    void *h;
    group g;
    int st[MAX_RANKS], version, good;
    char errs[2048], want[600];
    unsigned char zero[SRT_NCCL_UNIQUE_ID_BYTES] = { 0 };

    unsetenv("SRT_NCCL_SO_PATH");
    lib = srt_nccl_load(NULL, &err);
    if (lib == NULL) {
        tap_diag("no libnccl.so.2 on the loader path, the real library's ABI is not checked "
                 "here (%s)", err.msg);
        return;
    }
    h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    *(void **)&real_error_string = h ? dlsym(h, "ncclGetErrorString") : NULL;
    version = srt_nccl_version(lib);
    ok(version >= 20900 && version < 100000, "real libnccl.so.2: version code %d", version);
    if (setup_group(&g, lib, 1, 0, 0, 0) != SRT_OK) {
        ok(0, "real libnccl.so.2: unique id");
        return;
    }
    ok(memcmp(g.id, zero, sizeof zero) != 0, "real libnccl.so.2: ncclGetUniqueId filled the id");
    good = run_ranks(&g, rank_real_init, 1, st, errs, sizeof errs);
    if (good == 1) {
        ok(strstr(errs, "initialised") != NULL,
           "real libnccl.so.2: size-1 communicator (a GPU is present)");
    } else {
        const char *paren = strrchr(errs, '(');
        int code = paren ? atoi(paren + 1) : -1;
        snprintf(want, sizeof want, "nccl: ncclCommInitRank failed: %s (%d)",
                 real_error_string && code > 0 ? real_error_string(code) : "?", code);
        ok(WIFEXITED(st[0]) && strstr(errs, want) != NULL,
           "real libnccl.so.2 without a GPU: ncclCommInitRank fails cleanly, message carries "
           "NCCL's error string");
        diag_lines(errs);
    }
    if (h)
        dlclose(h);
    srt_nccl_unload(lib);
}

int main(void)
{
    srt_nccl_lib *lib;

    signal(SIGPIPE, SIG_IGN);
    unsetenv("FAKE_NCCL_FAIL");
    lib = loading();
    if (lib == NULL)
        return tap_done();
    raw_abi(lib);
    if (nccl_error_string == NULL)
        return tap_done();
    collectives(lib, 1, 100, 30, NULL);
    collectives(lib, 2, 3001, 300, NULL);
    collectives(lib, 4, 777, 300, "4096");
    collectives(lib, 2, 20000, 60, "1024");
    thread_ranks(lib);
    gpu_program_on_fake();
    init_failures(lib);
    injected_failures(lib);
    peers_missing(lib);
    group_churn(lib);
    srt_nccl_unload(lib);
    real_nccl();
    return tap_done();
}
