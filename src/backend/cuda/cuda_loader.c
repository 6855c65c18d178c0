/* libsrt's side of the CUDA backend: finds and dlopens the plugin (libsrt_cuda.so) on first use
 * and forwards to it. Built in every configuration; without SRT_HAVE_CUDA the build made no
 * plugin, and only $SRT_CUDA_PLUGIN can point at one. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cuda/cuda_plugin.h"

static pthread_once_t       plugin_once = PTHREAD_ONCE_INIT;
static srt_cuda_plugin_api  plugin;
static int                  plugin_ok;
static char                 plugin_why[512];

static void host_log(srt_log_level level, const char *msg)
{
    srt_log(level, "%s", msg);
}

static const srt_cuda_host_api host_api = {
    .abi = SRT_CUDA_PLUGIN_ABI,
    .dequant_row = srt_cpu_dequant_row,
    .log = host_log,
};

static int try_open(const char *path, char *why, size_t n)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, n, "cannot load the CUDA backend plugin: %s", dlerror());
        return 0;
    }
    srt_cuda_plugin_init_fn init = (srt_cuda_plugin_init_fn)dlsym(h, SRT_CUDA_PLUGIN_ENTRY);
    if (!init) {
        snprintf(why, n, "%s is not an ngx_srt CUDA plugin (no %s)", path, SRT_CUDA_PLUGIN_ENTRY);
        dlclose(h);
        return 0;
    }
    memset(&plugin, 0, sizeof plugin);
    if (init(&host_api, &plugin) != 0 || plugin.abi != SRT_CUDA_PLUGIN_ABI) {
        snprintf(why, n, "%s speaks plugin ABI %d, this libsrt speaks %d", path, plugin.abi,
                 SRT_CUDA_PLUGIN_ABI);
        dlclose(h);   /* nothing of it is referenced yet */
        return 0;
    }
    return 1;   /* kept loaded for the life of the process */
}

static void load_plugin(void)
{
    const char *env = getenv("SRT_CUDA_PLUGIN");
    if (env && *env) {
        plugin_ok = try_open(env, plugin_why, sizeof plugin_why);
        return;
    }
#ifdef SRT_CUDA_PLUGIN_PATH
    plugin_ok = try_open(SRT_CUDA_PLUGIN_PATH, plugin_why, sizeof plugin_why);
    if (plugin_ok)
        return;
    char first[sizeof plugin_why];
    memcpy(first, plugin_why, sizeof first);
    plugin_ok = try_open("libsrt_cuda.so", plugin_why, sizeof plugin_why);
    if (!plugin_ok)
        memcpy(plugin_why, first, sizeof first);
#else
    plugin_ok = try_open("libsrt_cuda.so", plugin_why, sizeof plugin_why);
    if (!plugin_ok)
        snprintf(plugin_why, sizeof plugin_why,
                 "this build has no CUDA support (built without nvcc; set SRT_CUDA_PLUGIN to a libsrt_cuda.so)");
#endif
}

static int have_plugin(char *why, size_t n)
{
    pthread_once(&plugin_once, load_plugin);
    if (!plugin_ok && why && n)
        snprintf(why, n, "%s", plugin_why);
    return plugin_ok;
}

int srt_cuda_probe(char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = 0;
    if (!have_plugin(why, why_len))
        return 0;
    return plugin.probe(why, why_len);
}

srt_backend *srt_cuda_backend_create(int device_index, double mem_fraction, srt_err *err)
{
    char why[512];
    if (!have_plugin(why, sizeof why)) {
        srt_err_set(err, "srt_device cuda: %s", why);
        return NULL;
    }
    return plugin.create(device_index, mem_fraction, err);
}

int srt_backend_is_cuda(const srt_backend *be)
{
    return be && be->ops && be->ops->name && strcmp(be->ops->name, "cuda") == 0;
}

int srt_cuda_backend_mem(srt_backend *be, size_t *pool_bytes, size_t *used_bytes)
{
    if (!srt_backend_is_cuda(be))
        return SRT_ERROR;
    return plugin.mem(be, pool_bytes, used_bytes);
}

int32_t srt_cuda_graph_bucket(int32_t n)
{
    if (n < 1 || n > SRT_CUDA_GRAPH_MAX_BS)
        return -1;
    if (n <= 8) {
        int32_t b = 1;
        while (b < n)
            b *= 2;
        return b;
    }
    return (n + 7) / 8 * 8;
}

int srt_cuda_graph_capture(srt_backend *be, int32_t bs, srt_cuda_graph_body body, void *user, srt_err *err)
{
    if (!be || !be->ops->graph_capture)
        return srt_err_set(err, "graphs need a backend with graph support (CUDA)");
    return be->ops->graph_capture(be, bs, body, user, err);
}

int srt_cuda_graph_ready(srt_backend *be, int32_t bs)
{
    return be && be->ops->graph_ready ? be->ops->graph_ready(be, bs) : 0;
}

int srt_cuda_graph_replay(srt_backend *be, int32_t bs, srt_err *err)
{
    if (!be || !be->ops->graph_replay)
        return srt_err_set(err, "graphs need a backend with graph support (CUDA)");
    return be->ops->graph_replay(be, bs, err);
}

void srt_cuda_graph_clear(srt_backend *be)
{
    if (be && be->ops->graph_clear)
        be->ops->graph_clear(be);
}

int srt_cuda_sample(srt_backend *be, float *logits, int32_t n_rows, int32_t vocab,
                    const srt_cuda_sample_params *params, const int32_t *counts, int32_t *out_ids, srt_err *err)
{
    if (!srt_backend_is_cuda(be))
        return srt_err_set(err, "srt_cuda_sample needs the CUDA backend");
    return plugin.sample(be, logits, n_rows, vocab, params, counts, out_ids, err);
}
