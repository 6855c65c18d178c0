/* Device hooks (hook ABI 1.1) on a real GPU: the example libsrt_hook_steer_cuda.so, whose
 * forward_device launches a kernel on the engine's stream, is captured into the decode CUDA
 * graphs instead of forcing eager mode.
 *
 * Four CUDA runners on a golden tiny model, each with its own model and registry:
 *   G  graphs on,  steer_cuda (device entry)        -> captured, replayed
 *   E  graphs off, steer_cuda (device entry)        -> the same kernels eagerly
 *   H  graphs on,  libsrt_hook_steer.so (host hook) -> every decode step eager
 *   N  graphs on,  no hook                          -> the unsteered output
 * Four sequences decode together (bucket 4: no padding, so the graph runs the very kernels of
 * the eager step): G's logits must equal E's bit for bit at every step; G must capture and
 * replay with no step eager for hooks; H must run every decode step eagerly; G's greedy tokens
 * must equal H's (the same steering, by the host) and differ from N's somewhere (the hook ran).
 * Needs a CUDA device; run by scripts/gpu-check (stage tests). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/tap.h"
#include "hooks/registry.h"
#include "srt/backend.h"
#include "srt/backend_cuda.h"
#include "srt/model.h"
#include "srt/sampling.h"

#define NS    4
#define SLOTS 96
#define STEPS 24

typedef struct lane {
    const char        *name;
    srt_model         *m;
    srt_hook_registry *reg;
    srt_runner        *r;
    srt_kv_pool       *kv;
    float             *logits;
} lane;

static int make_lane(lane *l, const char *name, const char *model, int graphs, const char *spec, srt_err *err)
{
    l->name = name;
    srt_runner_opts o = { .max_batch_tokens = 64, .max_seqs = NS, .n_threads = 2, .device = SRT_RUNNER_CUDA,
                          .mem_fraction = 0.05, .graphs = graphs ? SRT_RUNNER_GRAPHS_ON : SRT_RUNNER_GRAPHS_OFF };
    if (srt_model_load(model, &l->m, err) != SRT_OK || srt_runner_create(l->m, &o, &l->r, err) != SRT_OK ||
        srt_kv_pool_create_on(srt_model_config_of(l->m), 1, NS * SLOTS, SRT_BF16, srt_runner_backend(l->r), &l->kv,
                               err) != SRT_OK)
        return SRT_ERROR;
    l->logits = calloc((size_t)NS * srt_model_config_of(l->m)->vocab_size, sizeof(float));
    if (!spec)
        return SRT_OK;
    int n_mod;
    srt_module *mods = srt_model_modules(l->m, &n_mod);
    if (!(l->reg = srt_hook_registry_create(mods, n_mod, err)))
        return SRT_ERROR;
    srt_hook_registry_use_backend(l->reg, srt_runner_backend(l->r));
    if (srt_hook_registry_load_json(l->reg, spec, strlen(spec), name, err) != SRT_OK)
        return SRT_ERROR;
    return srt_hook_registry_check_entries(l->reg, err);
}

static void free_lane(lane *l)
{
    srt_hook_registry_free(l->reg);
    srt_kv_pool_free(l->kv);
    srt_runner_free(l->r);
    srt_model_free(l->m);
    free(l->logits);
}

int main(void)
{
    char why[512];
    if (!ok(srt_cuda_probe(why, sizeof why) > 0, "a usable CUDA device")) {
        tap_diag("%s", why);
        return tap_done();
    }
    const char *mdir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    const char *libdir = getenv("SRT_HOOK_LIBDIR") ? getenv("SRT_HOOK_LIBDIR") : "build/lib";
    char model[512];
    snprintf(model, sizeof model, "%s/tiny-llama", mdir);
    srt_model *probe = NULL;
    srt_err err = { { 0 } };
    if (!ok(srt_model_load(model, &probe, &err) == SRT_OK, "model %s", model)) {
        tap_diag("%s", err.msg);
        return tap_done();
    }
    int H = (int)srt_model_config_of(probe)->hidden_size, V = srt_model_config_of(probe)->vocab_size;
    srt_model_free(probe);
    /* a steering vector large enough to move greedy tokens of a tiny random model */
    size_t cap = (size_t)H * 16 + 512;
    char *vec = malloc(cap), *spec_dev = malloc(cap + 512), *spec_host = malloc(cap + 512);
    size_t off = 0;
    for (int j = 0; j < H; j++)
        off += (size_t)snprintf(vec + off, cap - off, "%s%g", j ? "," : "", (double)((j * 7919) % 13 - 6) / 4.0);
    const char *fmt = "{\"forward_hooks\": [{\"name\": \"steer\", \"target_modules\": [\"model.layers.1\"], "
                      "\"hook_factory\": \"%s/%s\", \"config\": {\"vector\": [%s], \"scale\": 0.5}}]}";
    snprintf(spec_dev, cap + 512, fmt, libdir, "libsrt_hook_steer_cuda.so:srt_steer_cuda_factory", vec);
    snprintf(spec_host, cap + 512, fmt, libdir, "libsrt_hook_steer.so:srt_steer_factory", vec);

    lane L[4] = { { 0 } };
    int made = make_lane(&L[0], "G (device hook, graphs)", model, 1, spec_dev, &err) == SRT_OK &&
               make_lane(&L[1], "E (device hook, eager)", model, 0, spec_dev, &err) == SRT_OK &&
               make_lane(&L[2], "H (host hook)", model, 1, spec_host, &err) == SRT_OK &&
               make_lane(&L[3], "N (no hook)", model, 1, NULL, &err) == SRT_OK;
    if (!ok(made, "four CUDA runners (device hook with graphs on and off, host hook, none)")) {
        tap_diag("%s", err.msg);
        goto out;
    }
    int32_t toks[4][NS][SLOTS], len[NS], plen[NS] = { 3, 5, 2, 4 };
    int32_t slots[NS][SLOTS];
    for (int s = 0; s < NS; s++)
        for (int j = 0; j < SLOTS; j++) {
            slots[s][j] = s * SLOTS + j;
            for (int l = 0; l < 4; l++)
                toks[l][s][j] = (int32_t)((11 + 37 * s + 13 * j) % V);
        }
    int bit_same = 1, ran = 1, same_tokens = 1, steered = 0, first_diff_step = -1;
    double max_host_diff = 0;
    for (int step = 0; step <= STEPS && ran; step++) {
        int32_t tok[64], pos[64], outs[64], start[NS + 1], sl[NS];
        const int32_t *ss[NS];
        for (int l = 0; l < 4 && ran; l++) {
            int T = 0;
            for (int s = 0; s < NS; s++) {
                int from = step == 0 ? 0 : plen[s] + step - 1, n = step == 0 ? plen[s] : 1;
                start[s] = T;
                for (int j = 0; j < n; j++, T++) {
                    tok[T] = toks[l][s][from + j];
                    pos[T] = from + j;
                    outs[T] = slots[s][from + j];
                }
                sl[s] = from + n;
                len[s] = sl[s];
                ss[s] = slots[s];
            }
            start[NS] = T;
            srt_forward_batch b = { .n_tokens = T, .token_ids = tok, .positions = pos, .out_slots = outs,
                                    .n_seqs = NS, .seq_start = start, .seq_len = sl, .seq_slots = ss,
                                    .forward_mode = step == 0 ? SRT_FORWARD_PREFILL : SRT_FORWARD_DECODE };
            if (srt_runner_forward(L[l].r, L[l].kv, &b, L[l].logits, &err) != SRT_OK) {
                tap_diag("%s, step %d: %s", L[l].name, step, err.msg);
                ran = 0;
            }
            for (int s = 0; s < NS; s++)
                toks[l][s][len[s]] = srt_argmax(L[l].logits + (size_t)s * V, V);
        }
        if (!ran)
            break;
        if (memcmp(L[0].logits, L[1].logits, (size_t)NS * V * sizeof(float)) != 0 && bit_same) {
            bit_same = 0;
            first_diff_step = step;
        }
        for (size_t i = 0; i < (size_t)NS * V; i++)
            max_host_diff = fmax(max_host_diff, fabs((double)L[0].logits[i] - L[2].logits[i]));
        for (int s = 0; s < NS; s++) {
            same_tokens &= toks[0][s][len[s]] == toks[2][s][len[s]];
            steered |= toks[0][s][len[s]] != toks[3][s][len[s]];
        }
    }
    ok(ran, "%d steps ran on every runner", STEPS + 1);
    ok(bit_same, "device hook: logits with graphs (replays) bit-identical to the eager device hook's at every step%s",
       first_diff_step >= 0 ? " (first difference at a later step printed below)" : "");
    if (first_diff_step >= 0)
        tap_diag("first difference at step %d", first_diff_step);
    srt_runner_graph_stats g, h;
    srt_runner_graph_stats_get(L[0].r, &g);
    srt_runner_graph_stats_get(L[2].r, &h);
    ok(g.captures >= 1 && g.replays >= STEPS - 1 && g.eager_hooked == 0 && g.capture_failures == 0,
       "device hook: captured into the decode graph and replayed (%lld captures, %lld replays, %lld eager, %lld "
       "failed captures)", (long long)g.captures, (long long)g.replays, (long long)g.eager_hooked,
       (long long)g.capture_failures);
    ok(h.eager_hooked == STEPS && h.replays == 0, "host hook: every decode step eager (%lld of %d)",
       (long long)h.eager_hooked, STEPS);
    ok(same_tokens, "device hook: greedy tokens equal the host steering hook's (max logit difference %.3g)",
       max_host_diff);
    ok(steered, "the steering changed some greedy token against the unhooked runner (the hook ran)");
out:
    for (int l = 0; l < 4; l++)
        free_lane(&L[l]);
    free(vec);
    free(spec_dev);
    free(spec_host);
    return tap_done();
}
