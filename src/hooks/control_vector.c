/* Control vectors (llama.cpp's --control-vector-scaled FILE S, --control-vector-layer-range
 * A B) as a built-in forward hook on the decoder layers.
 *
 * The file is llama.cpp's control-vector GGUF: 1-D F32 tensors "direction.N" (N >= 1, all
 * of the model's hidden size), several for one layer summing up. llama.cpp adds
 * scale * direction.N to the output of layer N (after the MLP's residual add, i.e. what HF's
 * model.layers.N returns) for N in [max(A, 1), min(B, n_layer - 1)]; layer 0 never has one.
 * This hook does the same, in float as llama.cpp does (acc += src * scale, then x + acc). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/hooks_internal.h"
#include "model/gguf.h"

#define CV_MAX_LAYERS 1024

typedef struct cvec {
    int64_t  n_embd;
    int32_t  n_layers;             /* directions indexed 1..n_layers */
    float   *raw;                  /* [n_layers][n_embd]: sum of the file's directions */
    float   *scaled;               /* raw * the spec's scale, as llama.cpp accumulates */
    uint8_t *has;                  /* [n_layers + 1] */
    float    scale;
    float   *buf;                  /* a call's rows */
    float   *rdir;                 /* a request's own scale */
    int64_t  cap;
    int      refs;                 /* hook objects sharing it (one per layer) */
} cvec;

static int layer_of(const char *name)
{
    const char *p = "model.layers.";
    char *end;
    long v;

    if (strncmp(name, p, strlen(p)) != 0)
        return -1;
    v = strtol(name + strlen(p), &end, 10);
    return *end == '\0' && v >= 0 && v < CV_MAX_LAYERS ? (int)v : -1;
}

static int cv_forward(srt_hook *hook, const srt_hook_call *call, const srt_module_args *args,
                      srt_tensor_view *out, srt_tensor_view *repl)
{
    cvec *c = hook->user;
    const srt_hook_host *h = call->host;
    int il = layer_of(call->module->name);
    const float *dir;
    int64_t n, rows;
    double rs;

    (void)args; (void)repl;
    if (call->forward_status != 0 || il < 1 || il > c->n_layers || !c->has[il])
        return SRT_HOOK_OK;
    if (out->ndim < 1 || out->shape[out->ndim - 1] != c->n_embd) {
        h->log(0, "control vector '%s': %s has last dimension %lld, the vector %lld",
               call->spec_name, call->module->name,
               (long long)(out->ndim ? out->shape[out->ndim - 1] : 0), (long long)c->n_embd);
        return SRT_HOOK_FAILED;
    }
    dir = c->scaled + (int64_t)(il - 1) * c->n_embd;
    if (SRT_HOOK_CALL_HAS(call, request_host) && call->request_host &&
        call->request_host->config_number(call->request_host, "scale", &rs) == 0) {
        const float *raw = c->raw + (int64_t)(il - 1) * c->n_embd;
        for (int64_t j = 0; j < c->n_embd; j++)
            c->rdir[j] = raw[j] * (float)rs;
        dir = c->rdir;
    }
    n = h->tensor_numel(out);
    if (n > c->cap) {
        float *nb = realloc(c->buf, (size_t)n * sizeof *nb);
        if (nb == NULL)
            return SRT_HOOK_FAILED;
        c->buf = nb;
        c->cap = n;
    }
    if (h->tensor_read_f32(h, out, c->buf, n) != 0)
        return SRT_HOOK_FAILED;
    rows = n / c->n_embd;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < c->n_embd; j++)
            c->buf[r * c->n_embd + j] += dir[j];
    return h->tensor_write_f32(h, out, c->buf, n) == 0 ? SRT_HOOK_OK : SRT_HOOK_FAILED;
}

static void cv_free(cvec *c)
{
    if (c == NULL)
        return;
    free(c->raw);
    free(c->scaled);
    free(c->has);
    free(c->buf);
    free(c->rdir);
    free(c);
}

static void cv_destroy(srt_hook *hook)
{
    cvec *c = hook->user;
    if (--c->refs <= 0)
        cv_free(c);
    free(hook);
}

/* The tensor's name in name; whether it is a "direction.*" tensor (a longer name is not). */
static int cv_direction_name(const srt_gguf_tensor_info *t, char name[64])
{
    if (t->name.len >= 64)
        return 0;
    memcpy(name, t->name.ptr, t->name.len);
    name[t->name.len] = '\0';
    return strncmp(name, "direction.", 10) == 0;
}

/* The file's directions, summed per layer (llama.cpp's common_control_vector_load_one). */
static cvec *cv_read(const char *path, float scale, srt_err *err)
{
    srt_gguf *g = NULL;
    cvec *c = calloc(1, sizeof *c);
    int found = 0;

    if (c == NULL) {
        srt_err_set(err, "out of memory");
        return NULL;
    }
    c->n_embd = -1;
    c->scale = scale;
    if (srt_gguf_open(path, &g, err) != SRT_OK)
        goto fail;
    /* first pass: sizes */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const srt_gguf_tensor_info *t = &g->tensors[i];
        char name[64], *end;
        long il;

        if (!cv_direction_name(t, name))
            continue;
        il = strtol(name + 10, &end, 10);
        if (name[10] == '\0' || *end != '\0' || il < 0 || il >= CV_MAX_LAYERS) {
            srt_err_set(err, "%s: tensor '%s': unparsable direction layer index", path, name);
            goto fail;
        }
        if (il == 0) {
            srt_err_set(err, "%s: tensor 'direction.0': layer 0 has no control vector "
                        "(directions start at 1, as in llama.cpp)", path);
            goto fail;
        }
        if (t->ggml_type != 0 || t->n_dims != 1) {
            srt_err_set(err, "%s: tensor '%s' must be a 1-D F32 tensor", path, name);
            goto fail;
        }
        if (c->n_embd >= 0 && t->dims[0] != c->n_embd) {
            srt_err_set(err, "%s: tensor '%s' has %lld values, the others %lld", path, name,
                        (long long)t->dims[0], (long long)c->n_embd);
            goto fail;
        }
        if (t->offset + (uint64_t)t->dims[0] * 4 > g->file.size - g->data_offset) {
            srt_err_set(err, "%s: tensor '%s' runs past the end of the file", path, name);
            goto fail;
        }
        c->n_embd = t->dims[0];
        if (il > c->n_layers)
            c->n_layers = (int32_t)il;
        found++;
    }
    if (!found || c->n_embd <= 0) {
        srt_err_set(err, "%s: no direction tensors (llama.cpp's control-vector GGUF has "
                    "'direction.1', 'direction.2', ...)", path);
        goto fail;
    }
    c->raw = calloc((size_t)c->n_layers * (size_t)c->n_embd, sizeof *c->raw);
    c->scaled = calloc((size_t)c->n_layers * (size_t)c->n_embd, sizeof *c->scaled);
    c->rdir = calloc((size_t)c->n_embd, sizeof *c->rdir);
    c->has = calloc((size_t)c->n_layers + 1, 1);
    if (!c->raw || !c->scaled || !c->rdir || !c->has) {
        srt_err_set(err, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const srt_gguf_tensor_info *t = &g->tensors[i];
        char name[64];
        float src;

        if (!cv_direction_name(t, name))
            continue;
        int il = (int)strtol(name + 10, NULL, 10);
        const uint8_t *data = (const uint8_t *)g->file.data + g->data_offset + t->offset;
        for (int64_t j = 0; j < c->n_embd; j++) {
            memcpy(&src, data + j * 4, 4);
            c->raw[(int64_t)(il - 1) * c->n_embd + j] += src;
            c->scaled[(int64_t)(il - 1) * c->n_embd + j] += src * scale;
        }
        c->has[il] = 1;
    }
    srt_gguf_close(g);
    return c;
fail:
    if (g)
        srt_gguf_close(g);
    cv_free(c);
    return NULL;
}

int srt_hook_control_vector_check(const char *path, srt_err *err)
{
    cvec *c = cv_read(path, 1.0f, err);
    if (c == NULL)
        return SRT_ERROR;
    cv_free(c);
    return SRT_OK;
}

int srt_hook_control_vector_load(srt_hook_registry *reg, const srt_control_vector_opts *o,
                                 int n_layers, srt_err *err)
{
    cvec *c = cv_read(o->path, o->scale, err);
    const char *name = o->name && o->name[0] ? o->name : "control_vector";
    int first = o->layer_start <= 0 ? 1 : o->layer_start;
    int last = o->layer_end <= 0 ? n_layers : o->layer_end;
    int attached = 0;

    if (c == NULL)
        return SRT_ERROR;
    if (last > n_layers - 1)
        last = n_layers - 1;        /* llama.cpp: layers 1 .. n_layer - 1 */
    for (int il = first; il <= last && il <= c->n_layers; il++) {
        char mod[64];
        srt_hook *h;
        srt_hook_attach_opts ao = { .name = name, .per_request = o->per_request };

        if (!c->has[il])
            continue;
        h = srt_hook_builtin_new(cv_forward, c, cv_destroy);
        if (h == NULL) {
            cv_free(c);
            return srt_err_set(err, "out of memory");
        }
        c->refs++;
        snprintf(mod, sizeof mod, "model.layers.%d", il);
        if (srt_hook_attach(reg, mod, h, &ao, err) < 0)
            return SRT_ERROR;       /* attach destroyed h; registered layers keep c */
        attached++;
    }
    if (attached == 0) {
        srt_err_set(err, "%s: no direction for layers %d-%d of this model (the file has "
                    "directions up to %d)", o->path, first, last, c->n_layers);
        cv_free(c);
        return SRT_ERROR;
    }
    srt_log(SRT_LOG_INFO, "Registered control vector '%s' (%s, scale %g) on %d layers",
            name, o->path, (double)o->scale, attached);
    return SRT_OK;
}
