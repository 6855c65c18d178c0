/* Golden test: the engine against HF transformers fixtures (t/fixtures/golden/NAME.json,
 * written by scripts/make_golden.py; the suite needs no torch).
 *
 * For every fixture whose model file is present:
 *   - the top-20 logits at the last prompt position match within the stated tolerance,
 *   - the 32-token greedy continuation is identical, run one sequence at a time,
 *   - and again with every case in one ragged batch (one prefill step for all prompts,
 *     then decode steps for all sequences together),
 *   - the module tree equals HF named_modules() (modules_<arch>.json).
 * A fixture whose model is missing is reported in a diag line, and fails when
 * SRT_REQUIRE_MODELS=1.
 *
 * Each model runs twice: with the precise matmul (f32 activations x dequantized weight
 * rows, what HF computes) and with the fast one (activations quantized to 8 bits for
 * integer dot products on quantized weights, as llama.cpp does).
 * Tolerances on |logit - HF|:
 *   F32/F16/BF16 weights, either path:        2e-3 + 0.1% of |HF|   (greedy must match)
 *   quantized weights, precise path:          0.02 + 0.2%           (greedy must match)
 *   quantized weights, fast path:             1.5 + 5%, and the mean |diff| over all
 *     cases' top-20 <= 0.5. 8-bit activations (llama.cpp's scheme too) move SmolLM2's
 *     logits: llama.cpp 0.3.36 itself is off from HF by up to 0.99 (mean 0.75) on the
 *     "def fibonacci" case and 0.23 on average. The greedy continuation is reported, and
 *     only the first token is required to match where HF's top-2 margin is at least 1.0. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#include "srt/model.h"
#include "srt/sampling.h"
#include "tap.h"

#define FIX_DIR "t/fixtures/golden"
#define NEW_TOKENS 32

typedef struct gcase {
    int32_t *ids;
    int32_t  n_ids;
    int32_t  top_ids[20];
    float    top_logits[20];
    int32_t  greedy[NEW_TOKENS];
    double   margin;
} gcase;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    return b;
}

static yajl_val jget(yajl_val o, const char *k)
{
    const char *p[] = { k, NULL };
    return yajl_tree_get(o, p, yajl_t_any);
}

static int read_ints(yajl_val a, int32_t *out, int32_t max)
{
    if (!a || !YAJL_IS_ARRAY(a) || (int32_t)a->u.array.len > max)
        return -1;
    for (size_t i = 0; i < a->u.array.len; i++)
        out[i] = (int32_t)YAJL_GET_INTEGER(a->u.array.values[i]);
    return (int32_t)a->u.array.len;
}

/* Each case alone: prefill, then greedy decode. */
static const char *tol_text[] = { "2e-3 + 0.1%", "0.02 + 0.2%", "1.5 + 5%, mean <= 0.5" };

static double tolerance(int cls, double want)
{
    switch (cls) {
    case 0: return 2e-3 + 1e-3 * fabs(want);
    case 1: return 0.02 + 2e-3 * fabs(want);
    default: return 1.5 + 0.05 * fabs(want);
    }
}

static void run_single(const char *name, srt_runner *r, srt_kv_pool *kv, const srt_model_config *c, gcase *cs,
                       int n_cases, int tol_class, int check_greedy)
{
    float *logits = malloc((size_t)c->vocab_size * sizeof(float));
    double worst = 0, total = 0;
    int logits_ok = 1, n_diffs = 0;
    for (int ci = 0; ci < n_cases; ci++) {
        gcase *g = &cs[ci];
        int32_t n_ctx = g->n_ids + NEW_TOKENS;
        int32_t *slots = malloc((size_t)n_ctx * sizeof(int32_t)), *pos = malloc((size_t)n_ctx * sizeof(int32_t));
        for (int32_t i = 0; i < n_ctx; i++)
            slots[i] = n_ctx - 1 - i;   /* slots deliberately not in position order */
        for (int32_t i = 0; i < n_ctx; i++)
            pos[i] = i;
        const int32_t *ss[1] = { slots };
        int32_t start[2] = { 0, g->n_ids }, len = g->n_ids;
        srt_forward_batch b = { .n_tokens = g->n_ids, .token_ids = g->ids, .positions = pos, .out_slots = slots,
                                .n_seqs = 1, .seq_start = start, .seq_len = &len, .seq_slots = ss };
        srt_err err = { { 0 } };
        if (!ok(srt_runner_forward(r, kv, &b, logits, &err) == SRT_OK, "%s case %d: prefill runs", name, ci)) {
            tap_diag("%s", err.msg);
            free(slots);
            free(pos);
            continue;
        }
        for (int k = 0; k < 20; k++) {
            double want = g->top_logits[k], got = logits[g->top_ids[k]];
            double tol = tolerance(tol_class, want);
            double d = fabs(got - want);
            if (d > worst)
                worst = d;
            total += d;
            n_diffs++;
            if (d > tol) {
                if (logits_ok)
                    tap_diag("%s case %d: logit of token %d: got %.5f want %.5f", name, ci, g->top_ids[k], got, want);
                logits_ok = 0;
            }
        }
        int32_t gen[NEW_TOKENS], tok = srt_argmax(logits, c->vocab_size), bad = -1;
        for (int step = 0; step < NEW_TOKENS; step++) {
            gen[step] = tok;
            if (bad < 0 && tok != g->greedy[step])
                bad = step;
            if (step + 1 == NEW_TOKENS)
                break;
            int32_t p = g->n_ids + step, st2[2] = { 0, 1 }, l2 = p + 1;
            srt_forward_batch d = { .n_tokens = 1, .token_ids = &tok, .positions = pos + p, .out_slots = slots + p,
                                    .n_seqs = 1, .seq_start = st2, .seq_len = &l2, .seq_slots = ss,
                                    .forward_mode = SRT_FORWARD_DECODE };
            if (srt_runner_forward(r, kv, &d, logits, &err) != SRT_OK) {
                tap_diag("%s", err.msg);
                bad = step;
                break;
            }
            tok = srt_argmax(logits, c->vocab_size);
        }
        if (check_greedy) {
            if (!ok(bad < 0, "%s case %d: 32-token greedy continuation identical to HF", name, ci))
                tap_diag("first difference at step %d: got %d want %d (HF min margin %.4f)", bad, gen[bad],
                         g->greedy[bad], g->margin);
        } else if (ok(gen[0] == g->greedy[0] || g->top_logits[0] - g->top_logits[1] < 1.0, "%s case %d: first greedy token is HF's (or HF's margin < 1.0)", name, ci))
            tap_diag("%s case %d: greedy agrees with HF for %d of 32 steps", name, ci, bad < 0 ? 32 : bad);
        free(slots);
        free(pos);
    }
    double mean = n_diffs ? total / n_diffs : 0;
    if (tol_class == 2 && mean > 0.5)
        logits_ok = 0;
    ok(logits_ok, "%s: top-20 logits within tolerance (%s) on %d prompts; worst |diff| %.5f, mean %.5f", name,
       tol_text[tol_class], n_cases, worst, mean);
    free(logits);
}

/* All cases in one ragged batch: one prefill step, then decode steps for all together. */
static void run_batched(const char *name, srt_runner *r, srt_kv_pool *kv, const srt_model_config *c, gcase *cs,
                        int n)
{
    int32_t total = 0, slot_base = 0;
    for (int i = 0; i < n; i++)
        total += cs[i].n_ids;
    int32_t *tok = malloc((size_t)total * sizeof(int32_t)), *pos = malloc((size_t)total * sizeof(int32_t));
    int32_t *outs = malloc((size_t)total * sizeof(int32_t)), *start = malloc((size_t)(n + 1) * sizeof(int32_t));
    int32_t *len = malloc((size_t)n * sizeof(int32_t)), **slots = malloc((size_t)n * sizeof(int32_t *));
    int32_t *cur = malloc((size_t)n * sizeof(int32_t));
    float *logits = malloc((size_t)n * c->vocab_size * sizeof(float));
    int32_t t = 0;
    for (int s = 0; s < n; s++) {
        start[s] = t;
        slots[s] = malloc((size_t)(cs[s].n_ids + NEW_TOKENS) * sizeof(int32_t));
        for (int32_t j = 0; j < cs[s].n_ids + NEW_TOKENS; j++)
            slots[s][j] = slot_base + j;
        slot_base += cs[s].n_ids + NEW_TOKENS;
        for (int32_t j = 0; j < cs[s].n_ids; j++, t++) {
            tok[t] = cs[s].ids[j];
            pos[t] = j;
            outs[t] = slots[s][j];
        }
        len[s] = cs[s].n_ids;
    }
    start[n] = t;
    srt_forward_batch b = { .n_tokens = total, .token_ids = tok, .positions = pos, .out_slots = outs, .n_seqs = n,
                            .seq_start = start, .seq_len = len, .seq_slots = (const int32_t *const *)slots,
                            .forward_mode = SRT_FORWARD_PREFILL };
    srt_err err = { { 0 } };
    int all_ok = srt_runner_forward(r, kv, &b, logits, &err) == SRT_OK;
    if (!all_ok)
        tap_diag("%s", err.msg);
    int mismatch_case = -1, mismatch_step = -1;
    for (int step = 0; step < NEW_TOKENS && all_ok; step++) {
        for (int s = 0; s < n; s++) {
            int32_t g = srt_argmax(logits + (size_t)s * c->vocab_size, c->vocab_size);
            if (g != cs[s].greedy[step] && mismatch_case < 0) {
                mismatch_case = s;
                mismatch_step = step;
            }
            cur[s] = g;
        }
        if (step + 1 == NEW_TOKENS)
            break;
        for (int s = 0; s < n; s++) {
            start[s] = s;
            pos[s] = cs[s].n_ids + step;
            outs[s] = slots[s][pos[s]];
            len[s] = pos[s] + 1;
        }
        start[n] = n;
        srt_forward_batch d = { .n_tokens = n, .token_ids = cur, .positions = pos, .out_slots = outs, .n_seqs = n,
                                .seq_start = start, .seq_len = len, .seq_slots = (const int32_t *const *)slots,
                                .forward_mode = SRT_FORWARD_DECODE };
        if (srt_runner_forward(r, kv, &d, logits, &err) != SRT_OK) {
            tap_diag("%s", err.msg);
            all_ok = 0;
        }
    }
    if (!ok(all_ok && mismatch_case < 0, "%s: all %d prompts batched together (%d prefill tokens, then %d-seq decode) give HF's greedy tokens",
            name, n, total, n))
        if (mismatch_case >= 0)
            tap_diag("case %d differs at step %d", mismatch_case, mismatch_step);
    for (int s = 0; s < n; s++)
        free(slots[s]);
    free(tok); free(pos); free(outs); free(start); free(len); free(slots); free(cur); free(logits);
}

static void check_modules(const char *name, srt_model *m, const char *arch_file)
{
    char *text = slurp(arch_file);
    char ebuf[128];
    yajl_val root = text ? yajl_tree_parse(text, ebuf, sizeof ebuf) : NULL;
    free(text);
    if (!ok(root && YAJL_IS_ARRAY(root), "%s: %s readable", name, arch_file)) {
        yajl_tree_free(root);
        return;
    }
    int n;
    srt_module *mods = srt_model_modules(m, &n);
    int same = (size_t)n == root->u.array.len, first_bad = -1;
    for (int i = 0; i < n && i < (int)root->u.array.len; i++) {
        yajl_val e = root->u.array.values[i];
        const char *hn = YAJL_GET_STRING(e->u.array.values[0]), *hc = YAJL_GET_STRING(e->u.array.values[1]);
        if (strcmp(hn, mods[i].info.name) || strcmp(hc, mods[i].info.class_name) || mods[i].info.index != i) {
            same = 0;
            if (first_bad < 0) {
                first_bad = i;
                tap_diag("module %d: got %s (%s), HF has %s (%s)", i, mods[i].info.name, mods[i].info.class_name, hn, hc);
            }
        }
    }
    ok(same, "%s: module tree is HF named_modules() exactly (%d modules, names and classes)", name, n);
    /* parents: the longest proper prefix that is a module */
    int parents_ok = 1;
    for (int i = 0; i < n; i++) {
        int p = mods[i].parent;
        const char *nm = mods[i].info.name;
        if (p < 0) {
            parents_ok &= strchr(nm, '.') == NULL;
            continue;
        }
        size_t pl = strlen(mods[p].info.name);
        parents_ok &= strncmp(nm, mods[p].info.name, pl) == 0 && nm[pl] == '.' && strchr(nm + pl + 1, '.') == NULL;
    }
    ok(parents_ok, "%s: every module's parent is its name's prefix", name);
    yajl_tree_free(root);
}

static void run_mode(const char *name, srt_model *m, const srt_model_config *c, gcase *cs, int n, int total,
                     int max_ids, int precise, int quantized)
{
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_err err = { { 0 } };
    char label[128];
    snprintf(label, sizeof label, "%s [%s]", name, precise ? "precise matmul" : "fast matmul");
    srt_runner_opts o = { .max_batch_tokens = total > max_ids + NEW_TOKENS ? total : max_ids + NEW_TOKENS,
                          .max_seqs = n, .n_threads = 0, .precise_matmul = precise };
    if (ok(srt_runner_create(m, &o, &r, &err) == SRT_OK &&
           srt_kv_pool_create(c, total + n * NEW_TOKENS, SRT_F32, &kv, &err) == SRT_OK,
           "%s: runner and kv pool", label)) {
        /* fast path on quantized weights: 8-bit activations, so only a logit tolerance */
        int tol_class = quantized ? (precise ? 1 : 2) : 0;
        run_single(label, r, kv, c, cs, n, tol_class, !(quantized && !precise));
        if (precise || !quantized)
            run_batched(label, r, kv, c, cs, n);
    } else
        tap_diag("%s", err.msg);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
}

static void run_fixture(const char *file)
{
    char path[1024], mpath[2048], ebuf[256];
    snprintf(path, sizeof path, FIX_DIR "/%s", file);
    char *text = slurp(path);
    yajl_val root = text ? yajl_tree_parse(text, ebuf, sizeof ebuf) : NULL;
    free(text);
    if (!ok(root != NULL, "%s parses", path))
        return;
    const char *name = YAJL_GET_STRING(jget(root, "model")), *rel = YAJL_GET_STRING(jget(root, "path"));
    yajl_val cases = jget(root, "cases");
    if (!ok(name && rel && cases && YAJL_IS_ARRAY(cases) && cases->u.array.len >= 5,
            "%s: has model, path and at least 5 cases", path)) {
        yajl_tree_free(root);
        return;
    }
    const char *dir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    snprintf(mpath, sizeof mpath, "%s/%s", dir, rel);
    FILE *probe = fopen(mpath, "r");
    if (!probe) {
        const char *req = getenv("SRT_REQUIRE_MODELS");
        if (req && strcmp(req, "1") == 0)
            ok(0, "%s: model %s is present (SRT_REQUIRE_MODELS=1)", name, mpath);
        else
            tap_diag("%s: model %s not present; run scripts/fetch-model.sh / scripts/make_tiny_models.py (set SRT_REQUIRE_MODELS=1 to fail)",
                     name, mpath);
        yajl_tree_free(root);
        return;
    }
    fclose(probe);

    int n = (int)cases->u.array.len, max_ids = 0, total = 0;
    gcase *cs = calloc((size_t)n, sizeof *cs);
    int parsed = 1;
    for (int i = 0; i < n; i++) {
        yajl_val c = cases->u.array.values[i], ids = jget(c, "input_ids");
        cs[i].n_ids = ids && YAJL_IS_ARRAY(ids) ? (int32_t)ids->u.array.len : 0;
        cs[i].ids = malloc((size_t)(cs[i].n_ids + 1) * sizeof(int32_t));
        parsed &= cs[i].n_ids > 0 && read_ints(ids, cs[i].ids, cs[i].n_ids) == cs[i].n_ids;
        parsed &= read_ints(jget(c, "top_ids"), cs[i].top_ids, 20) == 20;
        parsed &= read_ints(jget(c, "greedy"), cs[i].greedy, NEW_TOKENS) == NEW_TOKENS;
        yajl_val tl = jget(c, "top_logits"), mg = jget(c, "greedy_min_margin");
        parsed &= tl && YAJL_IS_ARRAY(tl) && tl->u.array.len == 20;
        for (int k = 0; parsed && k < 20; k++)
            cs[i].top_logits[k] = (float)YAJL_GET_DOUBLE(tl->u.array.values[k]);
        cs[i].margin = mg && YAJL_IS_NUMBER(mg) ? YAJL_GET_DOUBLE(mg) : NAN;
        if (cs[i].n_ids > max_ids)
            max_ids = cs[i].n_ids;
        total += cs[i].n_ids;
    }
    if (ok(parsed, "%s: %d cases read", name, n)) {
        srt_model *m = NULL;
        srt_err err = { { 0 } };
        if (ok(srt_model_load(mpath, &m, &err) == SRT_OK, "%s: loads %s", name, mpath)) {
            const srt_model_config *c = srt_model_config_of(m);
            const srt_weight *w = srt_model_weight(m, "model.layers.0.mlp.up_proj.weight");
            int quantized = w && w->dtype != SRT_F32 && w->dtype != SRT_F16 && w->dtype != SRT_BF16;
            run_mode(name, m, c, cs, n, total, max_ids, 1, quantized);
            run_mode(name, m, c, cs, n, total, max_ids, 0, quantized);
            if (strncmp(name, "tiny-", 5) == 0) {
                char mf[512];
                snprintf(mf, sizeof mf, FIX_DIR "/modules_%s.json", name + 5);
                check_modules(name, m, mf);
            }
        } else
            tap_diag("%s", err.msg);
        srt_model_free(m);
    }
    for (int i = 0; i < n; i++)
        free(cs[i].ids);
    free(cs);
    yajl_tree_free(root);
}

int main(void)
{
    DIR *d = opendir(FIX_DIR);
    if (!ok(d != NULL, "fixture directory " FIX_DIR " exists"))
        return tap_done();
    char *names[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".json") == 0 && strncmp(e->d_name, "modules_", 8) != 0)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    /* stable order */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    ok(n > 0, "%d golden fixture files", n);
    for (int i = 0; i < n; i++) {
        run_fixture(names[i]);
        free(names[i]);
    }
    return tap_done();
}
