/* The NCCL communicator (src/comm/nccl_comm.c) on the real libnccl.so.2 with device buffers,
 * at tp=1 (one GPU hosts one rank). Run by scripts/gpu-check (stage nccl). TAP output.
 *
 * Device memory and streams come from the CUDA driver API (libcuda.so.1, dlopened), so this
 * program, like the rest of libsrt, links no CUDA library and compiles on every machine. The
 * primary context is made current, which is the context the CUDA runtime inside NCCL uses.
 *
 *   SRT_NCCL_SO_PATH   the NCCL library (default: libnccl.so.2 on the loader path)
 *   TEST_NCCL_HOST=1   host buffers instead of device memory, no CUDA: only meaningful with
 *                      the fake NCCL (build/lib/libfake_nccl.so), to check this program itself
 *                      on a machine without a GPU
 *
 * What it checks: load + version, unique id, a size-1 communicator on an explicit stream and
 * on the default stream, all-reduce / all-gather / broadcast results bit-exact against the
 * inputs (at size 1 each is a copy, so any offset, size or dtype mistake shows), many repeated
 * collectives, and the error paths that stay local (bad root, barrier). It prints the
 * all-reduce latency for a few sizes. Two ranks need two GPUs: not run here. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../unit/tap.h"
#include "srt/comm.h"

typedef int cu_result;
typedef unsigned long long cu_ptr;

static struct {
    int   host;   /* TEST_NCCL_HOST: malloc'd buffers, no CUDA */
    void *lib;
    cu_result (*init)(unsigned);
    cu_result (*device_get)(int *, int);
    cu_result (*primary_ctx_retain)(void **, int);
    cu_result (*primary_ctx_release)(int);
    cu_result (*ctx_set_current)(void *);
    cu_result (*ctx_synchronize)(void);
    cu_result (*stream_create)(void **, unsigned);
    cu_result (*stream_destroy)(void *);
    cu_result (*stream_synchronize)(void *);
    cu_result (*mem_alloc)(cu_ptr *, size_t);
    cu_result (*mem_free)(cu_ptr);
    cu_result (*memcpy_htod)(cu_ptr, const void *, size_t);
    cu_result (*memcpy_dtoh)(void *, cu_ptr, size_t);
    cu_result (*get_error_string)(cu_result, const char **);
    int   device;
} cu;

static const char *cu_err(cu_result r)
{
    const char *s = NULL;
    if (cu.get_error_string)
        cu.get_error_string(r, &s);
    return s ? s : "unknown CUDA error";
}

static int cuda_open(char *why, size_t why_len)
{
    void *ctx;
    cu_result r;

    if (cu.host)
        return 0;
    cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cu.lib == NULL) {
        snprintf(why, why_len, "libcuda.so.1: %s", dlerror());
        return -1;
    }
#define SYM(field, name)                                                              \
    if ((*(void **)&cu.field = dlsym(cu.lib, name)) == NULL) {                         \
        snprintf(why, why_len, "libcuda.so.1 has no %s", name);                       \
        return -1;                                                                     \
    }
    SYM(init, "cuInit");
    SYM(device_get, "cuDeviceGet");
    SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    SYM(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2");
    SYM(ctx_set_current, "cuCtxSetCurrent");
    SYM(ctx_synchronize, "cuCtxSynchronize");
    SYM(stream_create, "cuStreamCreate");
    SYM(stream_destroy, "cuStreamDestroy_v2");
    SYM(stream_synchronize, "cuStreamSynchronize");
    SYM(mem_alloc, "cuMemAlloc_v2");
    SYM(mem_free, "cuMemFree_v2");
    SYM(memcpy_htod, "cuMemcpyHtoD_v2");
    SYM(memcpy_dtoh, "cuMemcpyDtoH_v2");
    SYM(get_error_string, "cuGetErrorString");
#undef SYM
    if ((r = cu.init(0)) != 0 || (r = cu.device_get(&cu.device, 0)) != 0 ||
        (r = cu.primary_ctx_retain(&ctx, cu.device)) != 0 || (r = cu.ctx_set_current(ctx)) != 0) {
        snprintf(why, why_len, "CUDA init: %s", cu_err(r));
        return -1;
    }
    return 0;
}

static void *dev_alloc(size_t bytes)
{
    cu_ptr p = 0;
    if (cu.host)
        return malloc(bytes);
    return cu.mem_alloc(&p, bytes) == 0 ? (void *)(uintptr_t)p : NULL;
}

static void dev_free(void *p)
{
    if (cu.host)
        free(p);
    else if (p)
        cu.mem_free((cu_ptr)(uintptr_t)p);
}

static int h2d(void *d, const void *h, size_t bytes)
{
    if (cu.host) {
        memcpy(d, h, bytes);
        return 0;
    }
    return cu.memcpy_htod((cu_ptr)(uintptr_t)d, h, bytes);
}

static int d2h(void *h, const void *d, size_t bytes)
{
    if (cu.host) {
        memcpy(h, d, bytes);
        return 0;
    }
    return cu.memcpy_dtoh(h, (cu_ptr)(uintptr_t)d, bytes);
}

/* The collectives are asynchronous on their stream; wait for them before reading back. */
static int stream_sync(void *stream)
{
    if (cu.host)
        return 0;
    return stream ? cu.stream_synchronize(stream) : cu.ctx_synchronize();
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float value_of(size_t i, int iter)
{
    return (float)((i * 2654435761u + (size_t)iter * 40503u) % 1000003u) * 1.0e-3f - 500.0f + 1.0f / 3.0f;
}

/* all-reduce, all-gather and broadcast of n elements on comm, results compared bit for bit */
static int collectives_once(srt_comm *c, void *stream, size_t n, int iter, char *why, size_t why_len)
{
    srt_err err;
    size_t bytes = n * sizeof(float);
    float *h = malloc(bytes ? bytes : 4), *back = malloc(bytes ? bytes : 4);
    float *d = dev_alloc(bytes ? bytes : 4), *d2 = dev_alloc(bytes ? bytes : 4);
    int rc = -1;

    if (!h || !back || !d || !d2) {
        snprintf(why, why_len, "allocation of %zu bytes failed", bytes);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = value_of(i, iter);
    if (h2d(d, h, bytes) != 0) {
        snprintf(why, why_len, "upload failed");
        goto out;
    }
    if (srt_comm_all_reduce_sum_f32(c, d, n, &err) != SRT_OK) {
        snprintf(why, why_len, "all_reduce: %s", err.msg);
        goto out;
    }
    /* all-gather from the reduced buffer into a second one, broadcast that in place */
    if (srt_comm_all_gather_f32(c, d, n, d2, &err) != SRT_OK) {
        snprintf(why, why_len, "all_gather: %s", err.msg);
        goto out;
    }
    if (srt_comm_broadcast(c, d2, bytes, 0, &err) != SRT_OK) {
        snprintf(why, why_len, "broadcast: %s", err.msg);
        goto out;
    }
    if (stream_sync(stream) != 0 || d2h(back, d2, bytes) != 0) {
        snprintf(why, why_len, "stream sync or download failed");
        goto out;
    }
    if (bytes && memcmp(back, h, bytes) != 0) {
        size_t i = 0;
        while (i < n && memcmp(&back[i], &h[i], sizeof(float)) == 0)
            i++;
        snprintf(why, why_len, "n=%zu: element %zu is %.9g, want %.9g", n, i, (double)back[i],
                 (double)h[i]);
        goto out;
    }
    rc = 0;
out:
    free(h);
    free(back);
    dev_free(d);
    dev_free(d2);
    return rc;
}

static void on_stream(srt_nccl_lib *lib, void *stream, const char *label)
{
    static const size_t sizes[] = { 1, 7, 4096, 1000003 };
    unsigned char id[SRT_NCCL_UNIQUE_ID_BYTES];
    srt_err err;
    srt_comm *c;
    char why[1200] = "";
    int bad = 0;

    if (!ok(srt_nccl_get_unique_id(lib, id, &err) == SRT_OK, "%s: unique id", label)) {
        tap_diag("%s", err.msg);
        return;
    }
    c = srt_nccl_comm_init(lib, id, 0, 1, stream, &err);
    if (!ok(c != NULL && c->rank == 0 && c->size == 1, "%s: size-1 communicator", label)) {
        tap_diag("%s", err.msg);
        return;
    }
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && !bad; k++)
        bad = collectives_once(c, stream, sizes[k], (int)k, why, sizeof why) != 0;
    ok(!bad, "%s: all_reduce, all_gather, broadcast of 1..1000003 floats on device buffers, "
       "bit-exact", label);
    if (bad)
        tap_diag("%s", why);
    for (int it = 0; it < 200 && !bad; it++)
        bad = collectives_once(c, stream, 1000 + (size_t)it, it, why, sizeof why) != 0;
    ok(!bad, "%s: 200 repeated rounds", label);
    if (bad)
        tap_diag("%s", why);
    ok(srt_comm_broadcast(c, why, 1, 1, &err) == SRT_ERROR, "%s: broadcast root 1 of 1 refused: %s",
       label, err.msg);
    ok(srt_comm_barrier(c, &err) == SRT_ERROR, "%s: barrier refused (needs a device buffer): %s",
       label, err.msg);

    /* latency of a lone all-reduce, enqueue to completion */
    for (size_t n = 1024; n <= (1u << 22) && stream; n *= 64) {
        float *d = dev_alloc(n * sizeof(float));
        int reps = 200;
        double t0;
        if (d == NULL)
            break;
        srt_comm_all_reduce_sum_f32(c, d, n, &err);
        stream_sync(stream);
        t0 = now_s();
        for (int i = 0; i < reps; i++)
            srt_comm_all_reduce_sum_f32(c, d, n, &err);
        stream_sync(stream);
        tap_diag("%s: all_reduce of %zu floats: %.1f us each (tp=1)", label, n,
                 (now_s() - t0) * 1e6 / reps);
        dev_free(d);
    }
    srt_comm_destroy(c);
}

int main(void)
{
    srt_err err;
    srt_nccl_lib *lib;
    char why[512];
    void *stream = NULL;
    const char *host = getenv("TEST_NCCL_HOST");

    cu.host = host && *host && strcmp(host, "0") != 0;
    lib = srt_nccl_load(NULL, &err);
    if (!ok(lib != NULL, "NCCL loaded (%s)", getenv("SRT_NCCL_SO_PATH") ? getenv("SRT_NCCL_SO_PATH")
                                                                     : "libnccl.so.2")) {
        tap_diag("%s", err.msg);
        return tap_done();
    }
    ok(srt_nccl_version(lib) > 0, "NCCL version %d", srt_nccl_version(lib));
    if (!ok(cuda_open(why, sizeof why) == 0, "%s", cu.host ? "host buffers (TEST_NCCL_HOST)"
                                                            : "CUDA device 0, primary context")) {
        tap_diag("%s", why);
        return tap_done();
    }
    if (!cu.host && !ok(cu.stream_create(&stream, 0) == 0, "a CUDA stream"))
        return tap_done();
    on_stream(lib, stream, cu.host ? "host" : "explicit stream");
    if (!cu.host) {
        on_stream(lib, NULL, "default stream");
        cu.stream_destroy(stream);
        cu.primary_ctx_release(cu.device);
    }
    srt_nccl_unload(lib);
    return tap_done();
}
