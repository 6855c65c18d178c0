/* A hook library built against hook ABI 1.0 (t/unit/abi10/srt_hooks.h is src/include/srt_hooks.h
 * as it was at 1.0, before per-request fields and device entries were appended): its
 * srt_hook_abi_version says 1.0 and its hook objects are the 1.0 size, allocated to exactly
 * that size, so an engine that read a 1.1 field of them would read past the allocation (the
 * sanitizer build catches it). The engine must load it and run it as a host hook. */
#include <stdlib.h>

#include "srt_hooks.h"   /* this directory's: the 1.0 header */

SRT_HOOK_LIBRARY();

int abi10_calls;

/* adds config "value" to every output element */
static int abi10_fwd(srt_hook *h, const srt_hook_call *call, const srt_module_args *args,
                     srt_tensor_view *out, srt_tensor_view *replacement)
{
    double *value = h->user;
    int64_t n = call->host->tensor_numel(out);
    float *buf = malloc((size_t)n * sizeof(float));
    int rc = SRT_HOOK_FAILED;
    if (buf && call->host->tensor_read_f32(call->host, out, buf, n) == 0) {
        for (int64_t i = 0; i < n; i++)
            buf[i] += (float)*value;
        if (call->host->tensor_write_f32(call->host, out, buf, n) == 0)
            rc = SRT_HOOK_OK;
    }
    free(buf);
    abi10_calls++;
    return rc;
}

static void abi10_destroy(srt_hook *h)
{
    free(h->user);
    free(h);
}

srt_hook *abi10_factory(const char *config_json, const srt_hook_host *host)
{
    srt_hook *h = malloc(sizeof *h);   /* the 1.0 size */
    double *value = calloc(1, sizeof *value);
    if (!h || !value) {
        free(h);
        free(value);
        return NULL;
    }
    host->config_number(host, "value", value);
    h->abi_version = SRT_HOOK_ABI_VERSION;
    h->struct_size = sizeof *h;
    h->forward_pre = NULL;
    h->forward = abi10_fwd;
    h->user = value;
    h->destroy = abi10_destroy;
    return h;
}
