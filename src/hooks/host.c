/* Services the engine gives hook libraries: logging, config lookups, and reading or
 * writing activations as float whatever their dtype, strides or device. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_tree.h>

#include "hooks/hooks_internal.h"

static void host_log(int level, const char *fmt, ...)
{
    char buf[1536];
    va_list ap;

    if (level < SRT_LOG_ERROR)
        level = SRT_LOG_ERROR;
    if (level > SRT_LOG_DEBUG)
        level = SRT_LOG_DEBUG;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    srt_log((srt_log_level)level, "%s", buf);
}

static yajl_val config_member(const srt_hook_host *host, const char *key)
{
    const srt_hook_host_state *st;
    const char *path[2] = { key, NULL };

    if (host == NULL || key == NULL)
        return NULL;
    st = host->engine;
    if (st == NULL || st->config == NULL)
        return NULL;
    return yajl_tree_get((yajl_val)st->config, path, yajl_t_any);
}

static int config_number(const srt_hook_host *host, const char *key, double *out)
{
    yajl_val v = config_member(host, key);
    if (v == NULL || !YAJL_IS_NUMBER(v))
        return -1;
    *out = YAJL_GET_DOUBLE(v);
    return 0;
}

static int config_bool(const srt_hook_host *host, const char *key, int *out)
{
    yajl_val v = config_member(host, key);
    if (v == NULL || !(YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v)))
        return -1;
    *out = YAJL_IS_TRUE(v);
    return 0;
}

static int config_string(const srt_hook_host *host, const char *key, const char **out)
{
    yajl_val v = config_member(host, key);
    if (v == NULL || !YAJL_IS_STRING(v))
        return -1;
    *out = v->u.string;
    return 0;
}

static int config_numbers(const srt_hook_host *host, const char *key, double *out,
                          int64_t cap, int64_t *n)
{
    yajl_val v = config_member(host, key);
    if (v == NULL || !YAJL_IS_ARRAY(v))
        return -1;
    for (size_t i = 0; i < v->u.array.len; i++)
        if (!YAJL_IS_NUMBER(v->u.array.values[i]))
            return -1;
    for (size_t i = 0; i < v->u.array.len && (int64_t)i < cap; i++)
        out[i] = YAJL_GET_DOUBLE(v->u.array.values[i]);
    *n = (int64_t)v->u.array.len;
    return 0;
}

static int64_t host_numel(const srt_tensor_view *v)
{
    return v ? srt_hook_view_numel(v) : -1;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    float f;

    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {            /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t srt_hook_f32_to_f16(float f)
{
    uint32_t x, sign, man;
    int32_t exp;

    memcpy(&x, &f, sizeof x);
    sign = (x >> 16) & 0x8000;
    exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff)                      /* inf / nan */
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 0x1f)
        return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {                                      /* subnormal or zero */
        if (exp < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;                                             /* may carry into the exponent: fine */
    return (uint16_t)h;
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static float load_elem(const void *p, int32_t dtype)
{
    switch (dtype) {
    case SRT_HOOK_DTYPE_F32:  { float v; memcpy(&v, p, 4); return v; }
    case SRT_HOOK_DTYPE_F16:  { uint16_t v; memcpy(&v, p, 2); return f16_to_f32(v); }
    case SRT_HOOK_DTYPE_BF16: { uint16_t v; memcpy(&v, p, 2); return bf16_to_f32(v); }
    default:                  { int32_t v; memcpy(&v, p, 4); return (float)v; }
    }
}

static void store_elem(void *p, int32_t dtype, float f)
{
    switch (dtype) {
    case SRT_HOOK_DTYPE_F32:  memcpy(p, &f, 4); break;
    case SRT_HOOK_DTYPE_F16:  { uint16_t v = srt_hook_f32_to_f16(f); memcpy(p, &v, 2); break; }
    case SRT_HOOK_DTYPE_BF16: { uint16_t v = f32_to_bf16(f); memcpy(p, &v, 2); break; }
    default:                  { int32_t v = (int32_t)f; memcpy(p, &v, 4); break; }
    }
}

/* Element offset (in elements) of flat row-major index i. */
static int64_t elem_offset(const srt_tensor_view *v, int64_t i)
{
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        int64_t sz = v->shape[d] ? v->shape[d] : 1;
        off += (i % sz) * v->strides[d];
        i /= sz;
    }
    return off;
}

/* CPU view, or a contiguous device view staged through a host buffer. */
static int with_host_copy(const srt_hook_host *host, const srt_tensor_view *v, int64_t n,
                          int to_host, void **staged, srt_tensor_view *hv)
{
    const srt_hook_host_state *st = host ? host->engine : NULL;
    size_t es = srt_hook_dtype_size(v->dtype);

    *staged = NULL;
    *hv = *v;
    if (es == 0 || n != srt_hook_view_numel(v) || (v->data == NULL && n > 0))
        return -1;
    if (v->device == SRT_HOOK_DEVICE_CPU)
        return 0;
    if (st == NULL || st->dev == NULL || st->dev->copy_d2h == NULL ||
        st->dev->copy_h2d == NULL || !srt_hook_view_is_contiguous(v))
        return -1;
    *staged = malloc((size_t)n * es + 1);
    if (*staged == NULL)
        return -1;
    if (to_host && st->dev->copy_d2h(*staged, v->data, (size_t)n * es, st->dev->ctx) != 0) {
        free(*staged);
        *staged = NULL;
        return -1;
    }
    hv->data = *staged;
    hv->device = SRT_HOOK_DEVICE_CPU;
    return 0;
}

static int tensor_read_f32(const srt_hook_host *host, const srt_tensor_view *v, float *dst,
                           int64_t n)
{
    size_t es;
    void *staged;
    srt_tensor_view hv;

    if (v == NULL || dst == NULL || with_host_copy(host, v, n, 1, &staged, &hv) != 0)
        return -1;
    es = srt_hook_dtype_size(v->dtype);
    if (hv.dtype == SRT_HOOK_DTYPE_F32 && srt_hook_view_is_contiguous(&hv)) {
        memcpy(dst, hv.data, (size_t)n * 4);
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = load_elem((const char *)hv.data + elem_offset(&hv, i) * (int64_t)es, hv.dtype);
    }
    free(staged);
    return 0;
}

static int tensor_write_f32(const srt_hook_host *host, srt_tensor_view *v, const float *src,
                            int64_t n)
{
    const srt_hook_host_state *st = host ? host->engine : NULL;
    size_t es;
    void *staged;
    srt_tensor_view hv;
    int rc = 0;

    if (v == NULL || src == NULL || with_host_copy(host, v, n, 0, &staged, &hv) != 0)
        return -1;
    es = srt_hook_dtype_size(v->dtype);
    for (int64_t i = 0; i < n; i++)
        store_elem((char *)hv.data + elem_offset(&hv, i) * (int64_t)es, hv.dtype, src[i]);
    if (staged) {
        rc = st->dev->copy_h2d(v->data, staged, (size_t)n * es, st->dev->ctx) == 0 ? 0 : -1;
        free(staged);
    }
    return rc;
}

int srt_hook_host_init(srt_hook_host_state *st, const char *spec_name, const char *spec_file,
                       const char *config_json, int tp_rank, int tp_size,
                       const srt_hook_device_ops *dev, srt_err *err)
{
    char errbuf[256];

    memset(st, 0, sizeof *st);
    st->config = yajl_tree_parse(config_json, errbuf, sizeof errbuf);
    if (st->config == NULL)
        return srt_err_set(err, "hook config is not valid JSON: %s", errbuf);
    st->dev = dev;
    st->host.abi_version = SRT_HOOK_ABI_VERSION;
    st->host.struct_size = sizeof st->host;
    st->host.spec_name = spec_name;
    st->host.spec_file = spec_file;
    st->host.config_json = config_json;
    st->host.tp_rank = tp_rank;
    st->host.tp_size = tp_size;
    st->host.log = host_log;
    st->host.config_number = config_number;
    st->host.config_bool = config_bool;
    st->host.config_string = config_string;
    st->host.config_numbers = config_numbers;
    st->host.tensor_numel = host_numel;
    st->host.tensor_read_f32 = tensor_read_f32;
    st->host.tensor_write_f32 = tensor_write_f32;
    st->host.engine = st;
    return SRT_OK;
}

void srt_hook_host_fini(srt_hook_host_state *st)
{
    if (st->config)
        yajl_tree_free((yajl_val)st->config);
    st->config = NULL;
}

srt_hook *srt_hook_builtin_new(srt_hook_fwd_fn forward, void *user, void (*destroy)(srt_hook *))
{
    srt_hook *h = calloc(1, sizeof *h);

    return h == NULL ? NULL : srt_hook_fill(h, NULL, forward, user, destroy);
}
