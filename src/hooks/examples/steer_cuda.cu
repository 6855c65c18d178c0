/* Example hook library: activation steering as a DEVICE hook (hook ABI 1.1), captured into the
 * decode CUDA graphs instead of forcing eager mode.
 *
 * Spec (the same config as libsrt_hook_steer.so):
 *   {"name": "steer", "target_modules": ["model.layers.10"],
 *    "hook_factory": "libsrt_hook_steer_cuda.so:srt_steer_cuda_factory",
 *    "config": {"vector": [0.1, -0.2, ...], "scale": 4.0}}
 * Adds scale * vector to every row of the module's output (f32, rows of the vector's length).
 *
 * Two entries: forward_device launches a kernel on the engine's stream (the CUDA backend: also
 * inside graph captures, where it is recorded once and replayed at every decode step), and
 * forward, the host entry, for an engine without a stream (the CPU backend).
 *
 * The graph contract (src/include/srt_hooks.h, "Device hooks"), as this hook keeps it: the
 * vector and the scale live in device buffers of the hook's own, allocated once and never
 * moved; the kernel takes their ADDRESSES, so a new scale written into the scale buffer
 * between steps (srt_steer_cuda_set_scale, from the scheduler thread) is what every later
 * replay uses, with no recapture. The launch configuration depends only on the view's shape,
 * which is the graph's. The buffers are allocated at the first device call that is not a
 * capture (the runner always runs a step eagerly before capturing it), on the device current
 * then: the engine's. A capture before that fails the call, and the engine runs eagerly. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srt_hooks.h"

extern "C" {
SRT_HOOK_LIBRARY();
}

namespace {

struct steer_cuda {
    float   *vec;        /* host copy of the vector */
    int64_t  dim;
    float    scale;
    float   *d_vec;      /* device buffers: fixed addresses for the hook's life */
    float   *d_scale;
    int      dev_failed;
};

/* out[r * stride + j] += *scale * vec[j]: the scale is read when the kernel runs */
__global__ void steer_rows(float *out, int64_t rows, int64_t dim, int64_t stride, const float *vec,
                           const float *scale)
{
    int64_t r = blockIdx.x;
    float s = *scale;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        out[r * stride + j] += s * vec[j];
    (void)rows;
}

int setup_device(steer_cuda *s, const srt_hook_host *host)
{
    if (s->d_vec)
        return 0;
    if (s->dev_failed ||
        cudaMalloc((void **)&s->d_vec, (size_t)s->dim * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&s->d_scale, sizeof(float)) != cudaSuccess ||
        cudaMemcpy(s->d_vec, s->vec, (size_t)s->dim * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(s->d_scale, &s->scale, sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        if (!s->dev_failed)
            host->log(0, "steer_cuda: device buffers: %s", cudaGetErrorString(cudaGetLastError()));
        s->dev_failed = 1;
        return -1;
    }
    return 0;
}

int steer_device(srt_hook *h, const srt_hook_device_call *call, const srt_module_args *args,
                 const srt_tensor_view *out)
{
    steer_cuda *s = (steer_cuda *)h->user;
    cudaStream_t st = (cudaStream_t)call->stream;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    (void)args;
    if (out->dtype != SRT_HOOK_DTYPE_F32 || out->ndim < 1 || out->shape[out->ndim - 1] != s->dim ||
        out->strides[out->ndim - 1] != 1) {
        call->host->log(0, "steer_cuda on %s: wants f32 rows of %lld contiguous values", call->module->name,
                        (long long)s->dim);
        return SRT_HOOK_FAILED;
    }
    if (cudaStreamIsCapturing(st, &cap) != cudaSuccess)
        return SRT_HOOK_FAILED;
    if (!s->d_vec && (cap != cudaStreamCaptureStatusNone || setup_device(s, call->host) != 0))
        return SRT_HOOK_FAILED;   /* no allocation under capture: the engine runs eagerly */
    int64_t rows = 1;
    for (int i = 0; i < out->ndim - 1; i++)
        rows *= out->shape[i];
    int64_t stride = out->ndim >= 2 ? out->strides[out->ndim - 2] : s->dim;
    if (rows > 0)
        steer_rows<<<(unsigned)rows, 256, 0, st>>>((float *)out->data, rows, s->dim, stride, s->d_vec,
                                                   s->d_scale);
    return cudaPeekAtLastError() == cudaSuccess ? SRT_HOOK_OK : SRT_HOOK_FAILED;
}

/* The host entry: where the engine has no stream (the CPU backend). */
int steer_host(srt_hook *h, const srt_hook_call *call, const srt_module_args *args, srt_tensor_view *out,
               srt_tensor_view *replacement)
{
    steer_cuda *s = (steer_cuda *)h->user;
    int64_t n = call->host->tensor_numel(out);
    (void)args;
    (void)replacement;
    if (out->ndim < 1 || out->shape[out->ndim - 1] != s->dim)
        return SRT_HOOK_FAILED;
    float *buf = (float *)malloc((size_t)n * sizeof(float));
    int rc = SRT_HOOK_FAILED;
    if (buf && call->host->tensor_read_f32(call->host, out, buf, n) == 0) {
        for (int64_t i = 0; i < n; i++)
            buf[i] += s->scale * s->vec[i % s->dim];
        rc = call->host->tensor_write_f32(call->host, out, buf, n) == 0 ? SRT_HOOK_OK : SRT_HOOK_FAILED;
    }
    free(buf);
    return rc;
}

void steer_destroy(srt_hook *h)
{
    steer_cuda *s = (steer_cuda *)h->user;
    if (s->d_vec)
        cudaFree(s->d_vec);
    if (s->d_scale)
        cudaFree(s->d_scale);
    free(s->vec);
    free(s);
    free(h);
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) srt_hook *srt_steer_cuda_factory(const char *config_json,
                                                                        const srt_hook_host *host)
{
    (void)config_json;
    int64_t n = 0;
    double scale = 1.0;
    if (host->config_numbers(host, "vector", NULL, 0, &n) != 0 || n <= 0) {
        host->log(0, "steer_cuda (spec '%s'): config.vector must be a non-empty list of numbers", host->spec_name);
        return NULL;
    }
    double *tmp = (double *)malloc((size_t)n * sizeof(double));
    steer_cuda *s = (steer_cuda *)calloc(1, sizeof *s);
    srt_hook *h = (srt_hook *)calloc(1, sizeof *h);
    if (s)
        s->vec = (float *)malloc((size_t)n * sizeof(float));
    if (!tmp || !s || !s->vec || !h || host->config_numbers(host, "vector", tmp, n, &n) != 0) {
        free(tmp);
        if (s)
            free(s->vec);
        free(s);
        free(h);
        return NULL;
    }
    host->config_number(host, "scale", &scale);
    for (int64_t i = 0; i < n; i++)
        s->vec[i] = (float)tmp[i];
    free(tmp);
    s->dim = n;
    s->scale = (float)scale;
    srt_hook_fill(h, NULL, steer_host, s, steer_destroy);
    h->forward_device = steer_device;
    return h;
}

/* A new scale for later steps (and replays): host copy and device buffer. Scheduler thread,
 * between forward passes. Returns 0 or -1. */
__attribute__((visibility("default"))) int srt_steer_cuda_set_scale(srt_hook *h, float scale)
{
    steer_cuda *s = (steer_cuda *)h->user;
    s->scale = scale;
    if (s->d_scale && cudaMemcpy(s->d_scale, &scale, sizeof scale, cudaMemcpyHostToDevice) != cudaSuccess)
        return -1;
    return 0;
}

} // extern "C"
