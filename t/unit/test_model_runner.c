/* The runner's batching contract, on small random models (no files needed):
 *   - chunked prefill over a cached prefix == one prefill,
 *   - sequences that share prefix slots (radix cache) == sequences computed alone,
 *   - ragged mixed batches (prefill chunks + decode tokens) == each sequence alone,
 *   - logit_rows give the logits of any token,
 *   - an F16 KV pool stays close to F32,
 *   - the slow module path (hooks attached everywhere, none firing) == the fast path,
 *   - malformed batches are refused with a message, never a crash,
 *   - bit-exact batch invariance (tiny llama and SmolLM2, fast and precise matmuls): chunked,
 *     prefix-cached, decoded and batched logits memcmp-equal to one prefill's,
 *   - the CPU runner's own copy of the weights (the default) gives the bits of reading them
 *     in place from the file mapping (weights_mmap), and really is a copy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hooks/hooks_internal.h"
#include "model/runner_internal.h"
#include "srt/model.h"
#include "tap.h"
#include "tiny_model_writer.h"

/* SmolLM2's bit-invariance prompt: 300 tokens (past the 256-key attention chunk, which the
 * tiny llama also crosses) in an optimized build; under ASan + UBSan (-O1, every access
 * checked), where 300 tokens of a 135M-parameter model took minutes, 64 tokens still run every
 * check through its Q4_1 kernels, its 30 layers and its real vocabulary. */
#if defined(__SANITIZE_ADDRESS__)
#define SMOLLM_PROMPT 64
#else
#define SMOLLM_PROMPT 300
#endif

/* Allocation counter: the test binary's malloc family wraps glibc's, so calls made inside
 * the engine during a forward step are seen. Under ASan the sanitizer owns malloc: its
 * allocation hook counts instead (make asan). */
static volatile int counting, n_allocs;
#if defined(__SANITIZE_ADDRESS__)
/* sanitizer/allocator_interface.h, which gcc does not install */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
static void count_alloc(const volatile void *p, size_t n) { (void)p; (void)n; if (counting) __sync_fetch_and_add(&n_allocs, 1); }
static void count_free(const volatile void *p) { (void)p; }
__attribute__((constructor)) static void install_alloc_hooks(void)
{
    __sanitizer_install_malloc_and_free_hooks(count_alloc, count_free);
}
#else
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
void *malloc(size_t n) { if (counting) __sync_fetch_and_add(&n_allocs, 1); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { if (counting) __sync_fetch_and_add(&n_allocs, 1); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { if (counting) __sync_fetch_and_add(&n_allocs, 1); return __libc_realloc(p, n); }
void *aligned_alloc(size_t a, size_t n) { if (counting) __sync_fetch_and_add(&n_allocs, 1); return __libc_memalign(a, n); }
int posix_memalign(void **p, size_t a, size_t n)
{
    if (counting)
        __sync_fetch_and_add(&n_allocs, 1);
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12;
}
#endif

static srt_model *model;
static int VOC;

typedef struct seqdesc {
    const int32_t *ids;   /* tokens of this step */
    int32_t n, pos0;      /* first position of this step */
    const int32_t *slots; /* slots of positions 0.. */
} seqdesc;

/* one forward step over up to 16 sequences of 512 tokens in all; logits of each sequence's last token
 * ([ns][voc]) */
static int step(srt_runner *r, srt_kv_pool *kv, const seqdesc *sd, int ns, float *logits, srt_err *err)
{
    static int32_t tok[512], pos[512], outs[512];
    int32_t start[17], len[16];
    const int32_t *ss[16];
    int t = 0;
    for (int s = 0; s < ns; s++) {
        start[s] = t;
        for (int i = 0; i < sd[s].n; i++, t++) {
            tok[t] = sd[s].ids[i];
            pos[t] = sd[s].pos0 + i;
            outs[t] = sd[s].slots[pos[t]];
        }
        len[s] = sd[s].pos0 + sd[s].n;
        ss[s] = sd[s].slots;
    }
    start[ns] = t;
    srt_forward_batch b = { .n_tokens = t, .token_ids = tok, .positions = pos, .out_slots = outs, .n_seqs = ns,
                            .seq_start = start, .seq_len = len, .seq_slots = ss, .forward_mode = SRT_FORWARD_MIXED };
    return srt_runner_forward(r, kv, &b, logits, err);
}

/* ---- the resident copy of the weights ---- */

static int same(const float *a, const float *b, int n) { return memcmp(a, b, sizeof(float) * (size_t)n) == 0; }

static int in_copy(const srt_runner *r, const srt_weight *w)
{
    const char *p = w->data, *lo = r->wmem;
    return r->wmem && p >= lo && p + (size_t)w->rows * w->row_stride <= lo + r->wmem_len;
}

/* A runner with the default copy and one reading in place: every weight view of the first
 * lies inside its copy (the tied embedding and lm_head one view), none of the second's do,
 * and a prefill then a decode step give memcmp-equal logits. */
static void resident(const char *label, srt_model *m, int precise)
{
    srt_err err = { { 0 } };
    const srt_model_config *c = srt_model_config_of(m);
    int voc = c->vocab_size;
    srt_runner *r[2] = { NULL, NULL };
    srt_kv_pool *kv[2] = { NULL, NULL };
    float *lg[2] = { malloc(2 * sizeof(float) * (size_t)voc), malloc(2 * sizeof(float) * (size_t)voc) };
    int32_t ids[33], slots[64];
    for (int i = 0; i < 33; i++)
        ids[i] = (i * 53 + 7) % voc;
    for (int i = 0; i < 64; i++)
        slots[i] = 3 * i;
    int rc = SRT_OK;
    for (int k = 0; k < 2 && rc == SRT_OK; k++) {
        srt_runner_opts o = { .max_batch_tokens = 64, .max_seqs = 2, .n_threads = 2, .precise_matmul = precise,
                              .weights_mmap = k };
        seqdesc pre = { ids, 32, 0, slots }, dec = { ids + 32, 1, 32, slots };
        rc = srt_runner_create(m, &o, &r[k], &err) == SRT_OK &&
                     srt_kv_pool_create(c, 256, SRT_F16, &kv[k], &err) == SRT_OK &&
                     step(r[k], kv[k], &pre, 1, lg[k], &err) == SRT_OK &&
                     step(r[k], kv[k], &dec, 1, lg[k] + voc, &err) == SRT_OK
                 ? SRT_OK
                 : SRT_ERROR;
    }
    if (rc != SRT_OK)
        tap_diag("%s", err.msg);
    int copied = rc == SRT_OK && in_copy(r[0], &r[0]->embed) && in_copy(r[0], &r[0]->lm_head.w) &&
                 r[1]->wmem == NULL, placed = copied;
    for (int32_t l = 0; copied && l < c->n_layers; l++) {
        const srt_layer *L = &r[0]->layers[l], *M = &r[1]->layers[l];
        copied &= in_copy(r[0], &L->q.w) && in_copy(r[0], &L->down.w) && in_copy(r[0], &L->input_norm.w);
        placed &= M->q.w.data == m->layers[l].q.w.data && L->q.w.data != m->layers[l].q.w.data;
    }
    ok(copied, "%s: the default runner's weight views all lie in its own copy, the weights_mmap one's in none", label);
    ok(placed, "%s: the weights_mmap runner reads the model's own q_proj rows", label);
    ok(rc == SRT_OK && same(lg[0], lg[1], 2 * voc), "%s %s: prefill and decode logits of the copy = in place, bit for bit",
       label, precise ? "precise" : "fast");
    for (int k = 0; k < 2; k++) {
        srt_kv_pool_free(kv[k]);
        srt_runner_free(r[k]);
        free(lg[k]);
    }
}

/* ---- bit-exact batch invariance (a token's logits are the same bits in any batch) ---- */


/* An L-token prompt prefilled at once is the reference; chunked prefill, a prefix-cache hit,
 * decode of the last token, and mixed batches (decodes + a prefill chunk) must all give
 * memcmp-equal logits. L = 300 goes past the attention's 256-key chunk; the chunks and the
 * cached prefix scale with L (64 + 200 + 36 and 270 at 300). */
static void bit_invariance(const char *label, srt_model *m, int precise, int L)
{
    enum { LMAX = 300, REG = 320, NREG = 6 };
    srt_err err = { { 0 } };
    int voc = srt_model_config_of(m)->vocab_size;
    const char *path = precise ? "precise" : "fast";
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_runner_opts o = { .max_batch_tokens = 320, .max_seqs = 8, .n_threads = 2, .precise_matmul = precise };
    if (!ok(srt_runner_create(m, &o, &r, &err) == SRT_OK &&
            srt_kv_pool_create(srt_model_config_of(m), REG * NREG, SRT_F32, &kv, &err) == SRT_OK,
            "%s %s: runner and kv pool", label, path)) {
        tap_diag("%s", err.msg);
        srt_runner_free(r);
        return;
    }
    int32_t ids[LMAX + 1], slots[NREG][REG];
    const int cuts[] = { 0, L * 64 / LMAX, L * 264 / LMAX, L }, hit = L * 270 / LMAX;
    const int n_new = L < 45 ? L - 5 : 40;   /* the new sequence of the mixed batch, from ids + 5 */
    if (L < 10 || L > LMAX) {
        ok(0, "%s: prompt length %d outside 10..%d", label, L, LMAX);
        return;
    }
    for (int i = 0; i <= L; i++)
        ids[i] = (i * 37 + 11) % voc;
    for (int g = 0; g < NREG; g++)
        for (int i = 0; i < REG; i++)
            slots[g][i] = g * REG + (i * 7) % REG;   /* scattered, distinct */
    float *ref = malloc(sizeof(float) * (size_t)voc), *got = malloc(sizeof(float) * 3 * (size_t)voc);
    float *alone = malloc(sizeof(float) * 3 * (size_t)voc);

    seqdesc whole = { ids, L, 0, slots[0] };
    int rc = step(r, kv, &whole, 1, ref, &err);

    /* three chunks over the cached prefix */
    int okc = rc == SRT_OK;
    for (int c = 0; c < 3; c++) {
        seqdesc ch = { ids + cuts[c], cuts[c + 1] - cuts[c], cuts[c], slots[1] };
        okc &= step(r, kv, &ch, 1, got, &err) == SRT_OK;
    }
    ok(okc && same(ref, got, voc), "%s %s: chunked prefill (%d+%d+%d) == one prefill of %d, bit for bit", label,
       path, cuts[1], cuts[2] - cuts[1], L - cuts[2], L);

    /* prefix-cache hit: the first `hit` positions are sequence 0's slots */
    for (int i = 0; i < hit; i++)
        slots[2][i] = slots[0][i];
    seqdesc tail = { ids + hit, L - hit, hit, slots[2] };
    ok(step(r, kv, &tail, 1, got, &err) == SRT_OK && same(ref, got, voc),
       "%s %s: prefill over a cached prefix == one prefill, bit for bit", label, path);

    /* decode of the last position after a prefill of the others */
    seqdesc pre = { ids, L - 1, 0, slots[3] }, dec = { ids + L - 1, 1, L - 1, slots[3] };
    ok(step(r, kv, &pre, 1, got, &err) == SRT_OK && step(r, kv, &dec, 1, got, &err) == SRT_OK &&
       same(ref, got, voc), "%s %s: decode of a position == its logits in a prefill, bit for bit", label, path);

    /* mixed batch: decode for sequence 0 at L, an n_new-token prefill of a new sequence, decode
     * for sequence 1 (same tokens as 0, other slots) at L; each alone, then together */
    seqdesc a1 = { ids + L, 1, L, slots[0] }, e1 = { ids + 5, n_new, 0, slots[4] }, b1 = { ids + L, 1, L, slots[1] };
    int okm = step(r, kv, &a1, 1, alone, &err) == SRT_OK &&
              step(r, kv, &e1, 1, alone + voc, &err) == SRT_OK &&
              step(r, kv, &b1, 1, alone + 2 * (size_t)voc, &err) == SRT_OK;
    seqdesc mix[3] = { a1, e1, b1 };
    okm &= step(r, kv, mix, 3, got, &err) == SRT_OK;
    ok(okm && same(alone, got, voc) && same(alone + voc, got + voc, voc) &&
       same(alone + 2 * (size_t)voc, got + 2 * (size_t)voc, voc) && same(alone, alone + 2 * (size_t)voc, voc),
       "%s %s: mixed batch (decode + %d-token prefill + decode) == each alone, bit for bit", label, path, n_new);
    seqdesc mix2[2] = { e1, a1 };
    okm = step(r, kv, mix2, 2, got, &err) == SRT_OK;
    ok(okm && same(alone + voc, got, voc) && same(alone, got + voc, voc),
       "%s %s: the same sequences in another order and batch, bit for bit", label, path);
    /* the last layer at the logit rows only: a chunk that asks for no logits still fills the
     * cache (the next chunk's logits are the one prefill's), and rows asked for in the middle of
     * two sequences have the bits they have when every row is asked for (all rows: no pruning) */
    {
        int32_t tok[2 * LMAX], pos[2 * LMAX], outs[2 * LMAX], start[3], len[2], none = 0;
        const int32_t *ss[2] = { slots[5], slots[5] + REG / 2 };
        int h = L / 2;
        for (int i = 0; i < h; i++)
            tok[i] = ids[i], pos[i] = i, outs[i] = slots[5][i];
        start[0] = 0, start[1] = h, len[0] = h;
        srt_forward_batch b0 = { .n_tokens = h, .token_ids = tok, .positions = pos, .out_slots = outs, .n_seqs = 1,
                                 .seq_start = start, .seq_len = len, .seq_slots = ss,
                                 .forward_mode = SRT_FORWARD_PREFILL, .n_logit_rows = 0, .logit_rows = &none };
        seqdesc rest = { ids + h, L - h, h, slots[5] };
        ok(srt_runner_forward(r, kv, &b0, got, &err) == SRT_OK && step(r, kv, &rest, 1, got, &err) == SRT_OK &&
           same(ref, got, voc), "%s %s: a chunk without logit rows, then the rest == one prefill, bit for bit", label,
           path);
        /* two sequences of 4 tokens (the second at slots REG/2..): rows 1, 3, 6 against all 8 (the
         * runner's max_seqs) */
        int n2 = 4, all[8], few[3] = { 1, 3, 6 };
        for (int t = 0; t < 2 * n2; t++) {
            tok[t] = ids[t % n2 + 1], pos[t] = t % n2, outs[t] = ss[t / n2][t % n2];
            all[t] = t;
        }
        start[1] = n2, start[2] = 2 * n2, len[0] = len[1] = n2;
        srt_forward_batch bf = { .n_tokens = 2 * n2, .token_ids = tok, .positions = pos, .out_slots = outs,
                                 .n_seqs = 2, .seq_start = start, .seq_len = len, .seq_slots = ss,
                                 .forward_mode = SRT_FORWARD_PREFILL, .n_logit_rows = 3, .logit_rows = few };
        float *every = malloc(sizeof(float) * 8 * (size_t)voc);
        int okp = every && srt_runner_forward(r, kv, &bf, got, &err) == SRT_OK;
        bf.n_logit_rows = 2 * n2, bf.logit_rows = all;
        okp = okp && srt_runner_forward(r, kv, &bf, every, &err) == SRT_OK;
        for (int i = 0; okp && i < 3; i++)
            okp = same(got + (size_t)i * voc, every + (size_t)few[i] * voc, voc);
        ok(okp, "%s %s: logit rows 1, 3 and 6 of two sequences == the same rows when all 8 are asked for, bit "
                "for bit", label, path);
        free(every);
    }
    free(ref);
    free(got);
    free(alone);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
}

int main(void)
{
    char dir[256];
    srt_err err = { { 0 } };
    tw_model tm;
    snprintf(dir, sizeof dir, "/tmp/srt_test_runner_%d", (int)getpid());
    tw_make(&tm, "qwen3", 21);
    tw_write_hf(&tm, dir, 1, "F32");
    VOC = tm.vocab;
    if (!ok(srt_model_load(dir, &model, &err) == SRT_OK, "tiny qwen3 loads")) {
        tap_diag("%s", err.msg);
        return tap_done();
    }
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL, *kv16 = NULL;
    srt_runner_opts o = { .max_batch_tokens = 64, .max_seqs = 16, .n_threads = 2 };
    ok(srt_runner_create(model, &o, &r, &err) == SRT_OK &&
       srt_kv_pool_create(srt_model_config_of(model), 512, SRT_F32, &kv, &err) == SRT_OK &&
       srt_kv_pool_create(srt_model_config_of(model), 512, SRT_F16, &kv16, &err) == SRT_OK, "runner and kv pools");

    int32_t ids[40], slotsA[64], slotsB[64], slotsC[64];
    for (int i = 0; i < 40; i++)
        ids[i] = (i * 37 + 11) % VOC;
    for (int i = 0; i < 64; i++) {
        slotsA[i] = 100 + i;
        slotsB[i] = 300 + 2 * i;   /* scattered */
        slotsC[i] = 500 - i;
    }
    float ref[96], got[16 * 96];

    /* one prefill of 40 tokens */
    seqdesc one = { ids, 40, 0, slotsA };
    ok(step(r, kv, &one, 1, ref, &err) == SRT_OK, "prefill of 40 tokens");
    /* the same as chunks 16 + 16 + 8 over the cached prefix, in other slots */
    int okc = 1;
    for (int c0 = 0; c0 < 40; c0 += 16) {
        seqdesc ch = { ids + c0, c0 + 16 <= 40 ? 16 : 40 - c0, c0, slotsB };
        okc &= step(r, kv, &ch, 1, got, &err) == SRT_OK;
    }
    ok(okc && tw_max_diff(ref, got, VOC) < 1e-4, "chunked prefill (16+16+8) over a cached prefix == one prefill (diff %.2g)",
       tw_max_diff(ref, got, VOC));

    /* radix sharing: C reuses A's slots for positions 0..29, then prefills its own 30..39 */
    for (int i = 0; i < 30; i++)
        slotsC[i] = slotsA[i];
    seqdesc tail = { ids + 30, 10, 30, slotsC };
    int rct = step(r, kv, &tail, 1, got, &err);
    double dt = tw_max_diff(ref, got, VOC);
    ok(rct == SRT_OK && dt < 1e-4, "a sequence whose prefix slots are shared with another (prefix cache hit) == full prefill (diff %.2g)",
       dt);

    /* mixed batch: decode token for A (pos 40), prefill chunk for a new sequence D, decode for B */
    float alone[3][96];
    int32_t next = 5, slotsD[64];
    for (int i = 0; i < 64; i++)
        slotsD[i] = 200 + i;
    seqdesc a1 = { &next, 1, 40, slotsA }, d1 = { ids + 3, 12, 0, slotsD }, b1 = { &next, 1, 40, slotsB };
    int okm = step(r, kv, &a1, 1, alone[0], &err) == SRT_OK && step(r, kv, &d1, 1, alone[1], &err) == SRT_OK &&
              step(r, kv, &b1, 1, alone[2], &err) == SRT_OK;
    seqdesc mix[3] = { a1, d1, b1 };
    okm &= step(r, kv, mix, 3, got, &err) == SRT_OK;
    ok(okm && tw_max_diff(alone[0], got, VOC) < 1e-4 && tw_max_diff(alone[1], got + VOC, VOC) < 1e-4 &&
       tw_max_diff(alone[2], got + 2 * VOC, VOC) < 1e-4,
       "mixed batch (decode + prefill chunk + decode) == each sequence alone");

    /* logit_rows: logits of token 9 of a prefill == last-token logits of a 10-token prefill */
    {
        int32_t pos[40], rows[2] = { 9, 39 };
        for (int i = 0; i < 40; i++)
            pos[i] = i;
        int32_t start[2] = { 0, 40 }, len = 40;
        const int32_t *ss[1] = { slotsA };
        srt_forward_batch b = { .n_tokens = 40, .token_ids = ids, .positions = pos, .out_slots = slotsA, .n_seqs = 1,
                                .seq_start = start, .seq_len = &len, .seq_slots = ss, .n_logit_rows = 2,
                                .logit_rows = rows };
        float ten[96];
        seqdesc p10 = { ids, 10, 0, slotsC };
        int okr = srt_runner_forward(r, kv, &b, got, &err) == SRT_OK && step(r, kv, &p10, 1, ten, &err) == SRT_OK;
        ok(okr && tw_max_diff(ten, got, VOC) < 1e-4 && tw_max_diff(ref, got + VOC, VOC) < 1e-4, "logit_rows give any token's logits");
    }

    /* F16 KV */
    seqdesc one16 = { ids, 40, 0, slotsA };
    int rc16 = step(r, kv16, &one16, 1, got, &err);
    double d16 = tw_max_diff(ref, got, VOC);
    ok(rc16 == SRT_OK && d16 < 2e-2 && d16 > 0, "F16 KV pool: logits within 2e-2 of F32 (diff %.2g)", d16);

    /* slow path: every module has a (hook-less) hooks block, so all go through srt_hooks_dispatch */
    {
        int n;
        srt_module *mods = srt_model_modules(model, &n);
        struct srt_module_hooks empty;
        memset(&empty, 0, sizeof empty);
        for (int i = 0; i < n; i++)
            mods[i].hooks = &empty;
        seqdesc again = { ids, 40, 0, slotsA };   /* same slots as ref: same attention order */
        int rc = step(r, kv, &again, 1, got, &err);
        for (int i = 0; i < n; i++)
            mods[i].hooks = NULL;
        ok(rc == SRT_OK && memcmp(ref, got, VOC * sizeof(float)) == 0,
           "dispatch through the hook engine on every module (unfused act_fn) == fast path, bit for bit (diff %.2g)",
           tw_max_diff(ref, got, VOC));
    }

    /* decode over a long context: attention splits the keys across threads (and merges);
     * the same token inside a 2-token step is computed without the split */
    {
        srt_kv_pool *big = NULL;
        srt_kv_pool_create(srt_model_config_of(model), 1300, SRT_F32, &big, &err);
        int32_t lids[700], s1[700], s2[700];
        for (int i = 0; i < 700; i++) {
            lids[i] = (i * 53 + 7) % VOC;
            s1[i] = i;
            s2[i] = 1299 - i;
        }
        int okl = 1;
        for (int c0 = 0; c0 < 640; c0 += 64) {
            seqdesc ch = { lids + c0, 64, c0, s1 }, ch2 = { lids + c0, 64, c0, s2 };
            okl &= step(r, big, &ch, 1, got, &err) == SRT_OK && step(r, big, &ch2, 1, got, &err) == SRT_OK;
        }
        float split[96], whole[2 * 96];
        seqdesc dec = { lids + 640, 1, 640, s1 };           /* 1 token, 641 keys: split */
        okl &= step(r, big, &dec, 1, split, &err) == SRT_OK;
        int32_t rows2[1] = { 1 }, pos2[2] = { 639, 640 }, st[2] = { 0, 2 }, len2 = 641;
        const int32_t *ss2[1] = { s2 };
        int32_t outs2[2] = { s2[639], s2[640] };
        /* redo position 639 in seq 2 together with 640: two tokens, no split */
        srt_forward_batch b2 = { .n_tokens = 2, .token_ids = lids + 639, .positions = pos2, .out_slots = outs2,
                                 .n_seqs = 1, .seq_start = st, .seq_len = &len2, .seq_slots = ss2,
                                 .n_logit_rows = 1, .logit_rows = rows2 };
        okl &= srt_runner_forward(r, big, &b2, whole, &err) == SRT_OK;
        double dl = tw_max_diff(split, whole, VOC);
        ok(okl && dl < 1e-4, "decode over 641 keys (keys split across threads) == the same token in a 2-token step (diff %.2g)", dl);
        srt_kv_pool_free(big);
    }

    /* no allocation in a forward step: prefill chunk and decode */
    {
        seqdesc pre = { ids, 20, 0, slotsC }, dec = { &next, 1, 20, slotsC };
        step(r, kv, &pre, 1, got, &err);   /* warm: first use of anything lazy */
        n_allocs = 0;
        counting = 1;
        int rc1 = step(r, kv, &pre, 1, got, &err);
        int rc2 = step(r, kv, &dec, 1, got, &err);
        seqdesc mix2[3] = { a1, d1, b1 };
        int rc3 = step(r, kv, mix2, 3, got, &err);
        counting = 0;
        ok(rc1 == SRT_OK && rc2 == SRT_OK && rc3 == SRT_OK && n_allocs == 0,
           "prefill, decode and mixed steps allocate nothing (%d allocations)", n_allocs);
        /* the counter works */
        counting = 1;
        srt_kv_pool *probe = NULL;
        srt_kv_pool_create(srt_model_config_of(model), 4, SRT_F32, &probe, &err);
        counting = 0;
        srt_kv_pool_free(probe);
        ok(n_allocs > 0, "the counter sees the engine's allocations (%d in srt_kv_pool_create)", n_allocs);
    }

    /* malformed batches */
    {
        int32_t tok[2] = { 1, 2 }, pos[2] = { 0, 1 }, outs[2] = { 100, 101 }, start[2] = { 0, 2 }, len = 2;
        const int32_t *ss[1] = { slotsA };
        struct { const char *what, *needle; } cases[] = {
            { "token id outside the vocabulary", "vocabulary" }, { "position beyond seq_len", "position" },
            { "slot outside the pool", "slot" }, { "out_slots disagreeing with seq_slots", "writes slot" },
            { "too many tokens", "n_tokens" }, { "seq_start not covering the batch", "seq_start" },
            { "logit row outside the batch", "logit row" }, { "no sequences", "n_seqs" },
        };
        int32_t bad_slots[64];
        memcpy(bad_slots, slotsA, sizeof bad_slots);
        for (int c = 0; c < 8; c++) {
            int32_t t2[2] = { 1, 2 }, p2[2] = { 0, 1 }, o2[2] = { 100, 101 }, st2[2] = { 0, 2 }, l2 = 2, lr = 5;
            const int32_t *s2[1] = { slotsA };
            srt_forward_batch b = { .n_tokens = 2, .token_ids = t2, .positions = p2, .out_slots = o2, .n_seqs = 1,
                                    .seq_start = st2, .seq_len = &l2, .seq_slots = s2 };
            switch (c) {
            case 0: t2[1] = VOC; break;
            case 1: p2[1] = 2; break;
            case 2: bad_slots[1] = 512; s2[0] = bad_slots; break;
            case 3: o2[1] = 100; break;
            case 4: b.n_tokens = 65; break;
            case 5: st2[1] = 1; break;
            case 6: b.logit_rows = &lr; b.n_logit_rows = 1; break;
            case 7: b.n_seqs = 0; break;
            }
            err.msg[0] = 0;
            ok(srt_runner_forward(r, kv, &b, got, &err) == SRT_ERROR && strstr(err.msg, cases[c].needle),
               "refused: %s (%s)", cases[c].what, err.msg);
        }
        (void)tok, (void)pos, (void)outs, (void)start, (void)len, (void)ss;
    }
    /* the KV pool refuses nonsense */
    srt_kv_pool *bad = NULL;
    ok(srt_kv_pool_create(srt_model_config_of(model), 0, SRT_F32, &bad, &err) == SRT_ERROR &&
       srt_kv_pool_create(srt_model_config_of(model), 8, SRT_Q4_0, &bad, &err) == SRT_ERROR,
       "kv pool: zero slots or a quantized dtype refused (%s)", err.msg);

    srt_kv_pool_free(kv);
    srt_kv_pool_free(kv16);
    srt_runner_free(r);
    srt_model_free(model);
    char cmd[300];

    /* bit-exact invariance on a tiny llama (f32 weights) and on SmolLM2 (Q4_1 GGUF), fast
     * and precise matmuls */
    {
        tw_model tl;
        char ldir[256], gpath[1024];
        snprintf(ldir, sizeof ldir, "/tmp/srt_test_runner_llama_%d", (int)getpid());
        tw_make(&tl, "llama", 33);
        tw_write_hf(&tl, ldir, 1, "F32");
        srt_model *lm = NULL;
        if (ok(srt_model_load(ldir, &lm, &err) == SRT_OK, "tiny llama loads")) {
            bit_invariance("tiny-llama", lm, 0, 300);
            bit_invariance("tiny-llama", lm, 1, 300);
            resident("tiny-llama", lm, 1);
            srt_model_free(lm);
        }
        tw_free(&tl);
        snprintf(cmd, sizeof cmd, "rm -rf %s", ldir);
        if (system(cmd) != 0)
            tap_diag("cannot remove %s", ldir);
        const char *mdir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
        snprintf(gpath, sizeof gpath, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", mdir);
        if (access(gpath, R_OK) == 0 && !getenv("SRT_TEST_FAST")) {
            if (ok(srt_model_load(gpath, &lm, &err) == SRT_OK, "SmolLM2 loads")) {
                bit_invariance("SmolLM2 Q4_1", lm, 0, SMOLLM_PROMPT);
                bit_invariance("SmolLM2 Q4_1", lm, 1, SMOLLM_PROMPT);
                resident("SmolLM2 Q4_1", lm, 1);
                resident("SmolLM2 Q4_1", lm, 0);
                srt_model_free(lm);
            }
        } else
            tap_diag("SmolLM2 GGUF not present (scripts/fetch-model.sh) or SRT_TEST_FAST set: tiny llama only");
    }
    tw_free(&tm);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        tap_diag("cannot remove %s", dir);
    return tap_done();
}
