/* Returned activations: a forward hook per captured module that copies the rows of the
 * requests asking for them (see activations.h and srt/request.h for the contract). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/activations.h"
#include "hooks/hooks_internal.h"

#define ACT_SPEC_NAME "return_activations"

typedef struct act_mod {
    struct srt_act_capture *cap;
    int32_t                 idx;      /* srt_act_module_index */
    int64_t                 handle;   /* registration id, 0 when detached */
    int                     refs;     /* live requests capturing it */
} act_mod;

typedef struct act_one {
    int32_t  mod, reduce, dtype;
    int64_t  next_pos;   /* "all"/"mean": rows seen, positions 0..next_pos-1 */
    int64_t  last_pos;   /* "last": position of the row kept, -1 none */
    int      broken;     /* a position was skipped, or the rows would not fit */
    float   *rows;       /* "all": next_pos rows; "last": one row */
    int64_t  cap_rows;
    double  *sum;        /* "mean" */
} act_one;

typedef struct act_req {
    uint64_t id;
    int      n;
    act_one  one[SRT_REQ_MAX_ACTIVATIONS];
} act_req;

struct srt_act_capture {
    srt_hook_registry *reg;
    int64_t            hidden;
    int32_t            n_layers;
    uint64_t           max_bytes;
    act_mod           *mods;      /* n_layers + 2 */
    act_req          **reqs;
    int                n_reqs, cap_reqs;
    float             *scratch;   /* one run of rows as f32 */
    int64_t            scratch_rows;
};

int32_t srt_act_module_index(const char *name, int32_t n_layers)
{
    static const char layers[] = "model.layers.";
    const char *p;
    long n = 0;

    if (name == NULL)
        return -1;
    if (strcmp(name, "model.embed_tokens") == 0)
        return 0;
    if (strcmp(name, "model.norm") == 0)
        return n_layers + 1;
    if (strncmp(name, layers, sizeof layers - 1) != 0)
        return -1;
    p = name + sizeof layers - 1;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '\0'))
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        n = n * 10 + (*p - '0');
        if (n >= n_layers)
            return -1;
    }
    return *p == '\0' ? (int32_t)(1 + n) : -1;
}

static uint64_t pad8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

static uint64_t elem_size(int32_t dtype) { return dtype == SRT_ACT_F16 ? 2 : 4; }

uint64_t srt_request_activations_bytes(const srt_request_activations *a, int64_t rows_all,
                                       int64_t hidden)
{
    uint64_t total = 0;

    for (int i = 0; i < a->n && i < SRT_REQ_MAX_ACTIVATIONS; i++) {
        int64_t rows = a->spec[i].reduce == SRT_ACT_ALL ? rows_all : 1;
        total += sizeof(srt_act_record) +
                 pad8((uint64_t)(rows > 0 ? rows : 0) * (uint64_t)hidden * elem_size(a->spec[i].dtype));
    }
    return total;
}

void srt_request_activations_clamp(srt_request_activations *a)
{
    if (a->n < 0)
        a->n = 0;
    if (a->n > SRT_REQ_MAX_ACTIVATIONS)
        a->n = SRT_REQ_MAX_ACTIVATIONS;
    for (int i = 0; i < a->n; i++)
        a->spec[i].module[SRT_REQ_ACT_MODULE_MAX - 1] = '\0';
}

/* ---- the hook ---------------------------------------------------------------------- */

static act_req *find_req(const srt_act_capture *c, uint64_t id)
{
    for (int k = 0; k < c->n_reqs; k++)
        if (c->reqs[k]->id == id)
            return c->reqs[k];
    return NULL;
}

/* Room for rows more rows in o ("all"), within the area's bound. */
static int grow_rows(const srt_act_capture *c, act_one *o, int64_t rows)
{
    int64_t want = o->next_pos + rows, cap = o->cap_rows ? o->cap_rows : 64;
    int64_t limit = (int64_t)(c->max_bytes / ((uint64_t)c->hidden * elem_size(o->dtype))) + 1;

    if (want <= o->cap_rows)
        return SRT_OK;
    if (want > limit)
        return SRT_ERROR;
    while (cap < want)
        cap *= 2;
    if (cap > limit)
        cap = limit;
    float *p = realloc(o->rows, (size_t)cap * (size_t)c->hidden * sizeof(float));
    if (p == NULL)
        return SRT_ERROR;
    o->rows = p;
    o->cap_rows = cap;
    return SRT_OK;
}

/* One request's rows [0, len) of this run (f32 in rows, positions in pos) into o. */
static void take_rows(const srt_act_capture *c, act_one *o, const float *rows, const int32_t *pos,
                      int32_t len)
{
    int64_t H = c->hidden;

    for (int32_t i = 0; i < len && !o->broken; i++) {
        const float *row = rows + (size_t)i * (size_t)H;
        if (o->reduce == SRT_ACT_LAST) {
            if (pos[i] >= o->last_pos) {
                memcpy(o->rows, row, (size_t)H * sizeof(float));
                o->last_pos = pos[i];
            }
            continue;
        }
        if (pos[i] < o->next_pos)
            continue;                    /* computed again after a retraction: seen */
        if (pos[i] > o->next_pos) {      /* a row we never saw: served from a cache */
            o->broken = 1;
            break;
        }
        if (o->reduce == SRT_ACT_MEAN) {
            for (int64_t j = 0; j < H; j++)
                o->sum[j] += (double)row[j];
        } else if (grow_rows(c, o, 1) == SRT_OK) {
            memcpy(o->rows + (size_t)o->next_pos * (size_t)H, row, (size_t)H * sizeof(float));
        } else {
            o->broken = 1;
            break;
        }
        o->next_pos++;
    }
}

static int capture_forward(srt_hook *h, const srt_hook_call *call, const srt_module_args *args,
                           srt_tensor_view *out, srt_tensor_view *replacement)
{
    act_mod *m = h->user;
    srt_act_capture *c = m->cap;
    const srt_batch_ctx *b = call->batch;
    int fit;

    (void)args;
    (void)replacement;
    fit = b && b->request_ids && b->positions && out->ndim == 2 && out->shape[0] == b->n_tokens &&
          out->shape[1] == c->hidden;
    for (int32_t t = 0; b && t < b->n_tokens; ) {
        int32_t end = t + 1;
        while (end < b->n_tokens && b->request_ids[end] == b->request_ids[t])
            end++;
        act_req *r = find_req(c, b->request_ids[t]);
        int read = 0;
        for (int k = 0; r && k < r->n; k++) {
            act_one *o = &r->one[k];
            if (o->mod != m->idx || o->broken)
                continue;
            if (!fit) {
                o->broken = 1;
                continue;
            }
            if (!read) {
                srt_tensor_view v = *out;
                int32_t len = end - t;
                if (len > c->scratch_rows) {
                    float *p = realloc(c->scratch, (size_t)len * (size_t)c->hidden * sizeof(float));
                    if (p == NULL) {
                        o->broken = 1;
                        continue;
                    }
                    c->scratch = p;
                    c->scratch_rows = len;
                }
                v.shape[0] = len;
                v.data = (char *)v.data + (size_t)t * (size_t)v.strides[0] * srt_hook_dtype_size(v.dtype);
                if (call->host->tensor_read_f32(call->host, &v, c->scratch, (int64_t)len * c->hidden) != 0) {
                    o->broken = 1;
                    continue;
                }
                read = 1;
            }
            take_rows(c, o, c->scratch, b->positions + t, end - t);
        }
        t = end;
    }
    return SRT_HOOK_OK;
}

static void capture_destroy(srt_hook *h)
{
    free(h);
}

static const char *module_name(const srt_act_capture *c, int32_t idx, char *buf, size_t cap)
{
    if (idx == 0)
        return "model.embed_tokens";
    if (idx == c->n_layers + 1)
        return "model.norm";
    snprintf(buf, cap, "model.layers.%d", (int)(idx - 1));
    return buf;
}

static int mod_ref(srt_act_capture *c, int32_t idx, srt_err *err)
{
    act_mod *m = &c->mods[idx];
    char name[64];

    if (m->refs++ > 0)
        return SRT_OK;
    srt_hook *h = srt_hook_builtin_new(capture_forward, m, capture_destroy);
    if (h == NULL) {
        m->refs--;
        return srt_err_set(err, "out of memory");
    }
    srt_hook_attach_opts o = { .name = ACT_SPEC_NAME };
    m->handle = srt_hook_attach(c->reg, module_name(c, idx, name, sizeof name), h, &o, err);
    if (m->handle < 0) {
        m->handle = 0;
        m->refs--;
        return SRT_ERROR;
    }
    return SRT_OK;
}

static void mod_unref(srt_act_capture *c, int32_t idx)
{
    act_mod *m = &c->mods[idx];
    srt_err e;

    if (m->refs <= 0 || --m->refs > 0 || m->handle == 0)
        return;
    if (srt_hook_delete(c->reg, m->handle, &e) != SRT_OK)
        srt_log(SRT_LOG_WARN, "return_activations: detaching the capture: %s", e.msg);
    m->handle = 0;
}

/* ---- requests ----------------------------------------------------------------------- */

srt_act_capture *srt_act_capture_new(srt_hook_registry *reg, int64_t hidden, int32_t n_layers,
                                     uint64_t max_bytes, srt_err *err)
{
    srt_act_capture *c = calloc(1, sizeof *c);

    if (reg == NULL || hidden <= 0 || n_layers <= 0) {
        free(c);
        srt_err_set(err, "return_activations: no model to capture from");
        return NULL;
    }
    if (c == NULL || (c->mods = calloc((size_t)n_layers + 2, sizeof *c->mods)) == NULL) {
        free(c);
        srt_err_set(err, "out of memory");
        return NULL;
    }
    c->reg = reg;
    c->hidden = hidden;
    c->n_layers = n_layers;
    c->max_bytes = max_bytes;
    for (int32_t i = 0; i < n_layers + 2; i++) {
        c->mods[i].cap = c;
        c->mods[i].idx = i;
    }
    return c;
}

static void req_free(act_req *r)
{
    for (int k = 0; k < r->n; k++) {
        free(r->one[k].rows);
        free(r->one[k].sum);
    }
    free(r);
}

void srt_act_capture_end(srt_act_capture *c, uint64_t id)
{
    if (c == NULL)
        return;
    for (int k = 0; k < c->n_reqs; k++) {
        act_req *r = c->reqs[k];
        if (r->id != id)
            continue;
        for (int i = 0; i < r->n; i++)
            mod_unref(c, r->one[i].mod);
        req_free(r);
        c->reqs[k] = c->reqs[--c->n_reqs];
        return;
    }
}

void srt_act_capture_free(srt_act_capture *c)
{
    if (c == NULL)
        return;
    while (c->n_reqs > 0)
        srt_act_capture_end(c, c->reqs[0]->id);
    free(c->reqs);
    free(c->mods);
    free(c->scratch);
    free(c);
}

int srt_act_capture_has(const srt_act_capture *c, uint64_t id)
{
    return c != NULL && find_req(c, id) != NULL;
}

int srt_act_capture_begin(srt_act_capture *c, uint64_t id, const srt_request_activations *a_in,
                          srt_err *err)
{
    srt_request_activations a = *a_in;   /* may be shared memory: one read, then clamp */
    act_req *r;

    srt_request_activations_clamp(&a);
    if (a.n == 0)
        return SRT_OK;
    if (c == NULL)
        return srt_err_set(err, "return_activations is not enabled for this model "
                           "(srt_max_activation_bytes)");
    for (int i = 0; i < a.n; i++) {
        const srt_act_spec *s = &a.spec[i];
        if (srt_act_module_index(s->module, c->n_layers) < 0)
            return srt_err_set(err, "return_activations[%d].module: '%s' is not model.embed_tokens, "
                               "model.layers.0..%d or model.norm", i, s->module, (int)c->n_layers - 1);
        if (s->reduce < SRT_ACT_LAST || s->reduce > SRT_ACT_ALL)
            return srt_err_set(err, "return_activations[%d].reduce: unknown value %d", i, (int)s->reduce);
        if (s->dtype != SRT_ACT_F32 && s->dtype != SRT_ACT_F16)
            return srt_err_set(err, "return_activations[%d].dtype: unknown value %d", i, (int)s->dtype);
    }
    if (c->n_reqs == c->cap_reqs) {
        int cap = c->cap_reqs ? c->cap_reqs * 2 : 16;
        act_req **v = realloc(c->reqs, (size_t)cap * sizeof *v);
        if (v == NULL)
            return srt_err_set(err, "out of memory");
        c->reqs = v;
        c->cap_reqs = cap;
    }
    srt_act_capture_end(c, id);
    r = calloc(1, sizeof *r);
    if (r == NULL)
        return srt_err_set(err, "out of memory");
    r->id = id;
    for (int i = 0; i < a.n; i++) {
        act_one *o = &r->one[i];
        o->mod = srt_act_module_index(a.spec[i].module, c->n_layers);
        o->reduce = a.spec[i].reduce;
        o->dtype = a.spec[i].dtype;
        o->last_pos = -1;
        int rc;
        if (o->reduce == SRT_ACT_LAST && (o->rows = malloc((size_t)c->hidden * sizeof(float))) == NULL)
            rc = srt_err_set(err, "out of memory");
        else if (o->reduce == SRT_ACT_MEAN && (o->sum = calloc((size_t)c->hidden, sizeof(double))) == NULL)
            rc = srt_err_set(err, "out of memory");
        else
            rc = mod_ref(c, o->mod, err);
        if (rc != SRT_OK) {
            for (int k = 0; k < i; k++)
                mod_unref(c, r->one[k].mod);
            r->n = i + 1;
            req_free(r);
            return SRT_ERROR;
        }
        r->n = i + 1;
    }
    c->reqs[c->n_reqs++] = r;
    return SRT_OK;
}

int srt_act_capture_write(srt_act_capture *c, uint64_t id, int64_t last_pos, void *dst, size_t cap,
                          size_t *len, srt_err *err)
{
    const act_req *r = c ? find_req(c, id) : NULL;
    unsigned char *p = dst;
    size_t used = 0;
    int64_t H = c ? c->hidden : 0;

    *len = 0;
    if (r == NULL)
        return SRT_OK;
    for (int k = 0; k < r->n; k++) {
        const act_one *o = &r->one[k];
        int64_t rows = o->reduce == SRT_ACT_ALL ? o->next_pos : 1;
        srt_act_record rec = { k, o->dtype, rows, H, (uint64_t)rows * (uint64_t)H * elem_size(o->dtype) };
        const float *src = o->rows;

        /* every position asked for was seen, each once: whatever happened in between (a
         * cache, a retraction, the capture hook removed by srt_admin), never fewer rows */
        if (o->broken || (o->reduce == SRT_ACT_LAST ? o->last_pos != last_pos : o->next_pos != last_pos + 1))
            return srt_err_set(err, "return_activations[%d]: some of positions 0..%lld were not computed "
                               "for this request, or did not fit", k, (long long)last_pos);
        if (sizeof rec + pad8(rec.bytes) > cap - used)
            return srt_err_set(err, "return_activations: %llu bytes do not fit the %llu of "
                               "srt_max_activation_bytes",
                               (unsigned long long)(used + sizeof rec + pad8(rec.bytes)),
                               (unsigned long long)cap);
        memcpy(p + used, &rec, sizeof rec);
        used += sizeof rec;
        if (o->reduce == SRT_ACT_MEAN) {
            /* the mean row, in the scratch buffer (H floats at least: a row was read) */
            for (int64_t j = 0; j < H; j++)
                c->scratch[j] = (float)(o->sum[j] / (double)o->next_pos);
            src = c->scratch;
        }
        if (o->dtype == SRT_ACT_F32) {
            memcpy(p + used, src, (size_t)rec.bytes);
        } else {
            for (uint64_t j = 0; j < (uint64_t)rows * (uint64_t)H; j++) {
                uint16_t h = srt_hook_f32_to_f16(src[j]);
                memcpy(p + used + 2 * j, &h, 2);
            }
        }
        memset(p + used + rec.bytes, 0, (size_t)(pad8(rec.bytes) - rec.bytes));
        used += (size_t)pad8(rec.bytes);
    }
    *len = used;
    return SRT_OK;
}
