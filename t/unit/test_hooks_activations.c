/* Returned activations (src/hooks/activations.c): the capture copies each asking request's
 * rows of a module's output, after the hooks registered before it (what the next module
 * receives), by position (a recomputed position is not taken twice, a position never seen
 * makes "all"/"mean" fail), and writes the records the worker turns into base64 tensors.
 * Other requests' rows and the output itself are untouched; the capture's hooks go away
 * with the last request that needs them. */
#include <math.h>

#include "tap.h"
#include "test_hooks_util.h"
#include "hooks/activations.h"
#include "srt/request.h"

#define H 3
#define NL 2

static srt_module mods[NL + 2];
static const char *names[NL + 2] = { "model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm" };

/* Output row of (request, position): what a module computes, deterministic so that a
 * recomputed position gives the same row. */
static float value(uint64_t rid, int32_t pos, int j) { return (float)pos * 1.5f + (float)j * 0.25f + (float)(rid % 7); }

static int layer_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *o)
{
    float *y = o->data;
    (void)self; (void)a;
    for (int32_t t = 0; t < b->n_tokens; t++)
        for (int j = 0; j < H; j++)
            y[t * H + j] = value(b->request_ids[t], b->positions[t], j);
    return SRT_OK;
}

/* A start-up hook on model.layers.1 (registered before any capture): adds 1 to every value. */
static int plus_one(srt_hook *h, const srt_hook_call *c, const srt_module_args *a, srt_tensor_view *out,
                    srt_tensor_view *repl)
{
    float *y = out->data;
    (void)h; (void)c; (void)a; (void)repl;
    for (int64_t i = 0; i < out->shape[0] * H; i++)
        y[i] += 1.0f;
    return SRT_OK;
}

static void forward(int idx, const uint64_t *rids, const int32_t *pos, int32_t n, float *y)
{
    float x[64 * H] = { 0 };
    srt_batch_ctx b = { SRT_FORWARD_MIXED, n, rids, pos, n, 0, 1 };
    srt_module_args a;
    srt_tensor_view o = { SRT_HOOK_DTYPE_F32, SRT_HOOK_DEVICE_CPU, 0, 2, { n, H }, { H, 1 }, y };

    memset(&a, 0, sizeof a);
    a.n_inputs = 1;
    a.inputs[0] = o;
    a.inputs[0].data = x;
    ok(srt_module_forward(&mods[idx], &b, layer_fn, NULL, &a, &o) == SRT_OK, "forward of %s", names[idx]);
}

static srt_request_activations acts(int n, const char *const *module, const int *reduce, const int *dtype)
{
    srt_request_activations a;
    memset(&a, 0, sizeof a);
    a.n = n;
    for (int i = 0; i < n; i++) {
        snprintf(a.spec[i].module, sizeof a.spec[i].module, "%s", module[i]);
        a.spec[i].reduce = reduce[i];
        a.spec[i].dtype = dtype[i];
    }
    return a;
}

/* The k-th record of an area: header and data pointer, or 0. */
static int record(const unsigned char *p, size_t len, int k, srt_act_record *rec, const unsigned char **data)
{
    size_t off = 0;
    for (int i = 0; off + sizeof *rec <= len; i++) {
        memcpy(rec, p + off, sizeof *rec);
        off += sizeof *rec;
        if (i == k) {
            *data = p + off;
            return 1;
        }
        off += (size_t)((rec->bytes + 7) & ~7ull);
    }
    return 0;
}

static uint16_t f16_of(float f)
{
    /* an independent reference for the values used here (exact binary fractions, no
     * rounding): sign 0, exponent and 10 mantissa bits */
    int e;
    float m = frexpf(f, &e);            /* f = m * 2^e, m in [0.5, 1) */
    return (uint16_t)(((e - 1 + 15) << 10) | (uint16_t)((m * 2.0f - 1.0f) * 1024.0f));
}

static void test_index(void)
{
    is_int(srt_act_module_index("model.embed_tokens", NL), 0, "embed_tokens is 0");
    is_int(srt_act_module_index("model.layers.0", NL), 1, "layers.0 is 1");
    is_int(srt_act_module_index("model.layers.1", NL), 2, "layers.1 is 2");
    is_int(srt_act_module_index("model.norm", NL), 3, "norm is n_layers + 1");
    is_int(srt_act_module_index("model.layers.2", NL), -1, "layers.2 of 2 layers: not a module");
    is_int(srt_act_module_index("model.layers.01", NL), -1, "a leading zero is another name");
    is_int(srt_act_module_index("model.layers.", NL), -1, "no number");
    is_int(srt_act_module_index("model.layers.1.mlp", NL), -1, "a submodule is not capturable");
    is_int(srt_act_module_index("model.layers.-1", NL), -1, "no sign");
    is_int(srt_act_module_index("lm_head", NL), -1, "lm_head is not");
    const char *m[] = { "model.layers.1", "model.norm" };
    int r[] = { SRT_ACT_ALL, SRT_ACT_LAST }, d[] = { SRT_ACT_F16, SRT_ACT_F32 };
    srt_request_activations a = acts(2, m, r, d);
    is_int((long long)srt_request_activations_bytes(&a, 5, H),
           (long long)(2 * sizeof(srt_act_record) + 32 + 16), "bytes: 5x3 f16 padded to 32, 3 f32 padded to 16");
}

static void test_capture(void)
{
    srt_err err = {{0}};
    srt_module *mp[NL + 2];
    float y[64 * H], ref[64 * H];
    static srt_hook steer = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, plus_one, NULL, NULL, NULL, NULL };
    unsigned char area[4096];
    size_t len;
    srt_act_record rec;
    const unsigned char *data;

    for (int i = 0; i < NL + 2; i++) {
        memset(&mods[i], 0, sizeof mods[i]);
        mods[i].info.name = names[i];
        mods[i].info.class_name = "X";
        mp[i] = &mods[i];
    }
    srt_hook_registry *reg = srt_hook_registry_create_named(mp, names, NL + 2, &err);
    ok(reg != NULL, "registry");
    srt_hook_attach_opts so = { .name = "steer" };
    ok(srt_hook_attach(reg, "model.layers.1", &steer, &so, &err) > 0, "a start-up hook on layers.1");
    srt_act_capture *cap = srt_act_capture_new(reg, H, NL, sizeof area, &err);
    ok(cap != NULL, "capture: %s", err.msg);
    is_int(srt_hook_registry_active(reg), 1, "no request: only the start-up hook is attached");

    /* request 10: all f32, last f16, mean f32 of layers.1; 20: last f32 of layers.1 (its
     * prefix came from the cache); 40: all of layers.1, starting at position 4 (a cached
     * prefix it should not have had); 30: nothing */
    const char *m10[] = { "model.layers.1", "model.layers.1", "model.layers.1" };
    int r10[] = { SRT_ACT_ALL, SRT_ACT_LAST, SRT_ACT_MEAN }, d10[] = { SRT_ACT_F32, SRT_ACT_F16, SRT_ACT_F32 };
    srt_request_activations a10 = acts(3, m10, r10, d10);
    const char *m20[] = { "model.layers.1" };
    int r20[] = { SRT_ACT_LAST }, d20[] = { SRT_ACT_F32 }, r40[] = { SRT_ACT_ALL };
    srt_request_activations a20 = acts(1, m20, r20, d20), a40 = acts(1, m20, r40, d20);
    ok(srt_act_capture_begin(cap, 10, &a10, &err) == SRT_OK, "begin 10");
    ok(srt_act_capture_begin(cap, 20, &a20, &err) == SRT_OK, "begin 20");
    ok(srt_act_capture_begin(cap, 40, &a40, &err) == SRT_OK, "begin 40");
    is_int(srt_hook_registry_active(reg), 2, "one capture hook on layers.1, whatever the number of requests");
    ok(srt_act_capture_has(cap, 10) && !srt_act_capture_has(cap, 30), "has: 10 yes, 30 no");

    /* step 1: a mixed batch; step 2: decode; step 3: request 10 retracted and computed again */
    static const uint64_t r1[] = { 10, 10, 20, 20, 20, 30, 40 };
    static const int32_t p1[] = { 0, 1, 4, 5, 6, 9, 4 };
    static const uint64_t r2[] = { 10, 20, 30, 40 };
    static const int32_t p2[] = { 2, 7, 10, 5 };
    static const uint64_t r3[] = { 10, 10, 10, 10 };
    static const int32_t p3[] = { 0, 1, 2, 3 };
    forward(2, r1, p1, 7, y);
    for (int t = 0; t < 7; t++)
        for (int j = 0; j < H; j++)
            ref[t * H + j] = value(r1[t], p1[t], j) + 1.0f;
    ok(memcmp(y, ref, 7 * H * sizeof(float)) == 0, "the output is the module's plus the start-up hook's, untouched");
    forward(2, r2, p2, 4, y);
    forward(1, r1, p1, 7, y);   /* layers.0: nobody asked, no hook there */
    ok(mods[1].hooks == NULL && mods[0].hooks == NULL, "layers.0 and embed_tokens keep no hooks");
    forward(2, r3, p3, 4, y);

    ok(srt_act_capture_write(cap, 10, 3, area, sizeof area, &len, &err) == SRT_OK, "write 10: %s", err.msg);
    ok(record(area, len, 0, &rec, &data), "record 0");
    ok(rec.spec == 0 && rec.dtype == SRT_ACT_F32 && rec.rows == 4 && rec.cols == H && rec.bytes == 4 * H * 4,
       "all: 4 rows (positions 0..3, the recomputed 0..2 taken once) of 3 f32");
    int good = 1;
    for (int p = 0; p < 4; p++)
        for (int j = 0; j < H; j++) {
            float v;
            memcpy(&v, data + (p * H + j) * 4, 4);
            good &= v == value(10, p, j) + 1.0f;
        }
    ok(good, "all: each row is what a hook after the start-up hook sees, in position order");
    ok(record(area, len, 1, &rec, &data) && rec.spec == 1 && rec.dtype == SRT_ACT_F16 && rec.rows == 1 &&
       rec.bytes == H * 2, "last: one f16 row");
    good = 1;
    for (int j = 0; j < H; j++) {
        uint16_t h;
        memcpy(&h, data + 2 * j, 2);
        good &= h == f16_of(value(10, 3, j) + 1.0f);
    }
    ok(good, "last: the row of the highest position (3), in f16");
    ok(record(area, len, 2, &rec, &data) && rec.spec == 2 && rec.rows == 1 && rec.bytes == H * 4, "mean: one f32 row");
    good = 1;
    for (int j = 0; j < H; j++) {
        double s = 0;
        float v;
        for (int p = 0; p < 4; p++)
            s += (double)(value(10, p, j) + 1.0f);
        memcpy(&v, data + 4 * j, 4);
        good &= v == (float)(s / 4);
    }
    ok(good, "mean: the double sum of the 4 rows over 4, as f32");
    ok(!record(area, len, 3, &rec, &data), "three records, no more");

    ok(srt_act_capture_write(cap, 20, 7, area, sizeof area, &len, &err) == SRT_OK, "write 20");
    float v20;
    ok(record(area, len, 0, &rec, &data) && rec.rows == 1, "20: last");
    memcpy(&v20, data, 4);
    ok(v20 == value(20, 7, 0) + 1.0f, "20: its own rows only (position 7), with a cached prefix");

    ok(srt_act_capture_write(cap, 10, 4, area, sizeof area, &len, &err) == SRT_ERROR &&
       strstr(err.msg, "return_activations[0]") && strstr(err.msg, "0..4"),
       "10 asked up to position 4, 3 was the last seen: refused, not short: %s", err.msg);
    ok(srt_act_capture_write(cap, 20, 8, area, sizeof area, &len, &err) == SRT_ERROR,
       "20: 'last' whose row is not the last position's: refused");
    ok(srt_act_capture_write(cap, 40, 5, area, sizeof area, &len, &err) == SRT_ERROR &&
       strstr(err.msg, "return_activations[0]") && strstr(err.msg, "not computed"),
       "40: 'all' that never saw position 0 fails, naming the entry: %s", err.msg);
    ok(srt_act_capture_write(cap, 10, 3, area, 64, &len, &err) == SRT_ERROR && strstr(err.msg, "srt_max_activation_bytes"),
       "a smaller area: refused, naming the directive: %s", err.msg);
    ok(srt_act_capture_write(cap, 30, 9, area, sizeof area, &len, &err) == SRT_OK && len == 0, "30 asked nothing: 0 bytes");

    srt_act_capture_end(cap, 10);
    srt_act_capture_end(cap, 20);
    is_int(srt_hook_registry_active(reg), 2, "request 40 still needs the capture hook");
    srt_act_capture_end(cap, 40);
    is_int(srt_hook_registry_active(reg), 1, "the last one gone: only the start-up hook again");

    /* refusals name the field */
    const char *bad[] = { "model.layers.7" };
    srt_request_activations ab = acts(1, bad, r20, d20);
    ok(srt_act_capture_begin(cap, 50, &ab, &err) == SRT_ERROR && strstr(err.msg, "return_activations[0].module"),
       "a module past the last layer: %s", err.msg);
    int rbad[] = { 9 }, dbad[] = { 7 };
    ab = acts(1, m20, rbad, d20);
    ok(srt_act_capture_begin(cap, 50, &ab, &err) == SRT_ERROR && strstr(err.msg, "return_activations[0].reduce"),
       "an unknown reduce: %s", err.msg);
    ab = acts(1, m20, r20, dbad);
    ok(srt_act_capture_begin(cap, 50, &ab, &err) == SRT_ERROR && strstr(err.msg, "return_activations[0].dtype"),
       "an unknown dtype: %s", err.msg);
    ok(srt_act_capture_begin(NULL, 50, &a20, &err) == SRT_ERROR && strstr(err.msg, "srt_max_activation_bytes"),
       "no capture (directive off): refused: %s", err.msg);
    ab = a20;
    ab.n = 1000;
    memset(ab.spec[0].module, 'x', sizeof ab.spec[0].module);
    ok(srt_act_capture_begin(cap, 50, &ab, &err) == SRT_ERROR, "a scribbled selection is clamped and refused");
    is_int(srt_hook_registry_active(reg), 1, "refused requests leave no hook behind");

    srt_act_capture_free(cap);
    srt_hook_registry_free(reg);
}

int main(void)
{
    test_index();
    test_capture();
    return tap_done();
}
