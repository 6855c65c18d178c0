/* CPU communicator across forked ranks, and the NCCL loader's failure modes. */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "srt/comm.h"
#include "tap.h"

static float value_of(int rank, size_t i)
{
    /* Values with many mantissa bits, so summation order would show. */
    return sinf((float)(i * 7 + 1) * 0.37f + (float)rank) * (1.0f + (float)rank * 1e-3f);
}

/* Each rank checks its own results and exits 0 on success. */
static int rank_main(srt_cpu_comm_group *g, int rank, size_t n)
{
    srt_err err;
    srt_comm *c = srt_cpu_comm_join(g, rank, &err);
    float *buf, *gathered;
    int size;

    if (c == NULL)
        return 10;
    size = c->size;
    buf = malloc(n * sizeof *buf);
    gathered = malloc(n * sizeof *gathered * (size_t)size);
    for (size_t i = 0; i < n; i++)
        buf[i] = value_of(rank, i);
    if (srt_comm_all_reduce_sum_f32(c, buf, n, &err) != SRT_OK)
        return 11;
    for (size_t i = 0; i < n; i++) {
        float want = value_of(0, i);
        for (int r = 1; r < size; r++)
            want += value_of(r, i);
        if (memcmp(&want, &buf[i], sizeof want) != 0)   /* bit-identical, rank order */
            return 12;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)(rank * 100000 + (int)i);
    if (srt_comm_all_gather_f32(c, buf, n, gathered, &err) != SRT_OK)
        return 13;
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < n; i++)
            if (gathered[(size_t)r * n + i] != (float)(r * 100000 + (int)i))
                return 14;
    char msg[5000];
    memset(msg, rank == size - 1 ? 'x' : 0, sizeof msg);
    if (srt_comm_broadcast(c, msg, sizeof msg, size - 1, &err) != SRT_OK)
        return 15;
    for (size_t i = 0; i < sizeof msg; i++)
        if (msg[i] != 'x')
            return 16;
    if (srt_comm_barrier(c, &err) != SRT_OK)
        return 17;
    free(buf);
    free(gathered);
    srt_comm_destroy(c);
    return 0;
}

static void run_group(int size, size_t n, size_t capacity)
{
    srt_err err;
    srt_cpu_comm_group *g = srt_cpu_comm_group_create(size, capacity, &err);
    pid_t pids[8];
    int all_ok = 1;

    if (!ok(g != NULL, "group of %d created", size)) {
        tap_diag("%s", err.msg);
        return;
    }
    for (int r = 0; r < size; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(rank_main(g, r, n));
    }
    for (int r = 0; r < size; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            all_ok = 0;
            tap_diag("rank %d exit status %d", r, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        }
    }
    ok(all_ok, "tp=%d: all_reduce bit-identical in rank order, all_gather, broadcast (n=%zu, "
       "capacity=%zu)", size, n, capacity);
    srt_cpu_comm_group_free(g);
}

static void dead_rank_is_an_error(void)
{
    srt_err err;
    srt_cpu_comm_group *g = srt_cpu_comm_group_create(2, 1024, &err);
    int pipefd[2];
    pid_t dying, survivor;
    int st;

    if (pipe(pipefd) != 0)
        return;
    dying = fork();
    if (dying == 0) {
        srt_comm *c = srt_cpu_comm_join(g, 1, &err);
        (void)c;
        _exit(0);   /* joins, then dies without taking part */
    }
    waitpid(dying, &st, 0);
    survivor = fork();
    if (survivor == 0) {
        srt_comm *c = srt_cpu_comm_join(g, 0, &err);
        float x = 1;
        srt_cpu_comm_set_timeout_ms(c, 5000);
        int rc = srt_comm_all_reduce_sum_f32(c, &x, 1, &err);
        ssize_t w = write(pipefd[1], err.msg, strlen(err.msg) + 1);
        (void)w;
        _exit(rc == SRT_ERROR ? 0 : 1);
    }
    waitpid(survivor, &st, 0);
    char msg[1024] = "";
    ssize_t r = read(pipefd[0], msg, sizeof msg - 1);
    (void)r;
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a dead rank makes the collective fail, not hang");
    ok(strstr(msg, "died") != NULL, "the error names the dead rank: %s", msg);
    srt_cpu_comm_group_free(g);
}

static void nccl_loader(void)
{
    srt_err err;
    srt_nccl_lib *lib = srt_nccl_load("/nonexistent/libnccl.so.2", &err);

    ok(lib == NULL && strstr(err.msg, "/nonexistent/libnccl.so.2") != NULL,
       "missing NCCL library is a clear error: %s", err.msg);
    lib = srt_nccl_load("libc.so.6", &err);
    ok(lib == NULL && strstr(err.msg, "ncclGetVersion") != NULL,
       "a library without NCCL symbols is refused: %s", err.msg);
    lib = srt_nccl_load(NULL, &err);
    if (lib != NULL) {
        ok(srt_nccl_version(lib) > 0, "libnccl.so.2 found, version %d", srt_nccl_version(lib));
        srt_nccl_unload(lib);
    } else {
        tap_diag("libnccl.so.2 not on the loader path here (%s)", err.msg);
    }
}

/* An all-reduce followed at once by a broadcast, many times: a rank still copying the
 * all-reduce's result out must not see the broadcast's bytes (the root used to write them
 * into the result area right after the last barrier). */
static void reduce_then_broadcast(int size)
{
    srt_err err;
    srt_cpu_comm_group *g = srt_cpu_comm_group_create(size, 1024, &err);
    pid_t pids[8];
    int all_ok = g != NULL;
    for (int r = 0; g && r < size; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            srt_comm *c = srt_cpu_comm_join(g, r, &err);
            int bad = !c;
            for (int i = 0; !bad && i < 3000; i++) {
                float x = r == 0 ? 1.0f : 0.0f;
                uint32_t v = r == 0 ? 0x45cb4000u + (uint32_t)i : 0;   /* a float far from 1 */
                bad = srt_comm_all_reduce_sum_f32(c, &x, 1, &err) != SRT_OK || x != 1.0f ||
                      srt_comm_broadcast(c, &v, sizeof v, 0, &err) != SRT_OK || v != 0x45cb4000u + (uint32_t)i;
            }
            srt_comm_destroy(c);
            _exit(bad);
        }
    }
    for (int r = 0; g && r < size; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        all_ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    ok(all_ok, "tp=%d: 3000 x (all-reduce, then broadcast at once): every rank reads its own results", size);
    srt_cpu_comm_group_free(g);
}

int main(void)
{
    reduce_then_broadcast(2);
    reduce_then_broadcast(3);
    run_group(2, 3001, 1024);      /* chunked: n > capacity */
    run_group(4, 777, 4096);
    run_group(4, 20000, 1024);
    run_group(1, 10, 1024);
    dead_rank_is_an_error();
    nccl_loader();
    return tap_done();
}
