/* srt-generate: offline generation with the engine, one sequence.
 *
 *   srt-generate --model PATH (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]
 *                [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
 *                [--threads N] [--ignore-eos] [--ids]
 *
 * Streams the generated text to stdout as it comes (token ids with --ids, or when the
 * model has no tokenizer); prefill and decode speed go to stderr. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <yajl/yajl_gen.h>

#include "hooks/registry.h"
#include "srt/chat_template.h"
#include "srt/frontend.h"
#include "srt/model.h"
#include "srt/sampling.h"
#include "srt/tokenizer.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: srt-generate --model PATH (--prompt TEXT | --prompt-ids ID,ID,...) [options]\n"
            "  --prompt TEXT      tokenized with the model's tokenizer (special tokens parsed, BOS as the model wants)\n"
            "  --chat             wrap --prompt as a user message in the model's chat template\n"
            "  --system TEXT      with --chat: a system message first\n"
            "  --ids              print token ids instead of text\n"
            "  --max-tokens N     tokens to generate (default 32)\n"
            "  --temperature T    0 = greedy (default 0)\n"
            "  --top-p P --top-k K --min-p P --seed S\n"
            "  --repetition-penalty R --frequency-penalty F --presence-penalty P\n"
            "  --ignore-eos       keep going past EOS\n"
            "  --threads N        compute threads (default: all cores)\n"
            "  --batch N          prefill chunk size (default 512)\n"
            "  --numerics exact|fast  exact (default): f32 activations (Q4_0/1, Q2/3_K, IQ4_NL/XS,\n"
            "                     and Q8_0, Q5_0/1, Q4/5/6_K on AVX-512: a 24-bit fixed point per\n"
            "                     32), HF's greedy tokens;\n"
            "                     fast: 8-bit activations on quantized weights (llama.cpp's scheme;\n"
            "                     on AVX-512 VNNI the exact kernels with one digit: ~2x exact's prefill)\n"
            "  --kv-cache-dtype f16|f32  the KV cache's element type (default f16)\n"
            "  --precise, --kv-f16  the same as --numerics exact, --kv-cache-dtype f16\n"
            "  --mmap             read the weights in place from the file mapping instead of a copy\n"
            "                     in 2 MB pages (srt_weights_mmap on)\n"
            "  --control-vector-scaled FILE:SCALE  a llama.cpp control-vector GGUF, as srt_control_vector\n"
            "                     (and llama.cpp's option of that name)\n"
            "  --control-vector-layer-range A B  the layers it applies to (default: all it can)\n"
            "  --margins          with --ids: each token as ID:MARGIN, MARGIN the gap between the best\n"
            "                     and the second-best logit of that step (how near a tie it was)\n");
}

static int parse_ids(const char *s, int32_t **out, int32_t *n)
{
    int32_t cap = 16, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    while (ids && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            return -1;
        }
        if (k == cap) {
            cap *= 2;
            int32_t *n2 = realloc(ids, (size_t)cap * sizeof *ids);
            if (!n2) {
                free(ids);
                return -1;
            }
            ids = n2;
        }
        ids[k++] = (int32_t)v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s) {
            free(ids);
            return -1;
        }
    }
    if (!ids || k == 0) {
        free(ids);
        return -1;
    }
    *out = ids;
    *n = k;
    return 0;
}

static void gen_str(yajl_gen g, const char *s)
{
    yajl_gen_string(g, (const unsigned char *)s, strlen(s));
}

/* The prompt as {"messages": [...], "add_generation_prompt": true, ...} through the template. */
static int render_chat(const srt_frontend *fe, const char *system, const char *user, char **out, srt_err *err)
{
    if (!fe->tmpl)
        return srt_err_set(err, "--chat: the model's tokenizer has no chat template");
    yajl_gen g = yajl_gen_alloc(NULL);
    yajl_gen_map_open(g);
    gen_str(g, "messages");
    yajl_gen_array_open(g);
    for (int i = system ? 0 : 1; i < 2; i++) {
        yajl_gen_map_open(g);
        gen_str(g, "role");
        gen_str(g, i == 0 ? "system" : "user");
        gen_str(g, "content");
        gen_str(g, i == 0 ? system : user);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
    srt_chat_context_gen_common(g, fe->bos_token, fe->eos_token);
    gen_str(g, "tools");
    yajl_gen_null(g);
    gen_str(g, "documents");
    yajl_gen_null(g);
    yajl_gen_map_close(g);
    const unsigned char *js;
    size_t jl, ol;
    yajl_gen_get_buf(g, &js, &jl);
    int rc = srt_chat_template_render(fe->tmpl, (const char *)js, jl, out, &ol, err);
    yajl_gen_free(g);
    return rc;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *ids_arg = NULL, *prompt_text = NULL;
    const char *system_text = NULL;
    int threads = 0, batch = 512, kv_f16 = 1, weights_mmap = 0, print_ids = 0, precise = 1, chat = 0, margins = 0;
    char cvec_path[4096] = "";
    srt_control_vector_opts cvec = { .path = cvec_path, .name = "control_vector", .scale = 1.0f };
    srt_hook_registry *hooks = NULL;
    srt_sampling_params sp;
    srt_err err = { { 0 } };

    srt_sampling_params_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && ++i)
        if (ARG("--model")) model_path = v;
        else if (ARG("--prompt-ids")) ids_arg = v;
        else if (ARG("--prompt")) prompt_text = v;
        else if (ARG("--system")) system_text = v;
        else if (strcmp(a, "--chat") == 0) chat = 1;
        else if (ARG("--max-tokens")) sp.max_tokens = atoi(v);
        else if (ARG("--temperature")) sp.temperature = strtof(v, NULL);
        else if (ARG("--top-p")) sp.top_p = strtof(v, NULL);
        else if (ARG("--top-k")) sp.top_k = atoi(v);
        else if (ARG("--min-p")) sp.min_p = strtof(v, NULL);
        else if (ARG("--seed")) sp.seed = strtoull(v, NULL, 10);
        else if (ARG("--repetition-penalty")) sp.repetition_penalty = strtof(v, NULL);
        else if (ARG("--frequency-penalty")) sp.frequency_penalty = strtof(v, NULL);
        else if (ARG("--presence-penalty")) sp.presence_penalty = strtof(v, NULL);
        else if (ARG("--threads")) threads = atoi(v);
        else if (ARG("--batch")) batch = atoi(v);
        else if (strcmp(a, "--ignore-eos") == 0) sp.ignore_eos = 1;
        else if (strcmp(a, "--kv-f16") == 0) kv_f16 = 1;
        else if (strcmp(a, "--mmap") == 0) weights_mmap = 1;
        else if (strcmp(a, "--ids") == 0) print_ids = 1;
        else if (strcmp(a, "--margins") == 0) margins = 1;
        else if (ARG("--control-vector-scaled") && strrchr(v, ':') && (size_t)(strrchr(v, ':') - v) < sizeof cvec_path) {
            snprintf(cvec_path, sizeof cvec_path, "%.*s", (int)(strrchr(v, ':') - v), v);
            cvec.scale = strtof(strrchr(v, ':') + 1, NULL);
        } else if (strcmp(a, "--control-vector-layer-range") == 0 && i + 2 < argc) {
            cvec.layer_start = atoi(argv[++i]);
            cvec.layer_end = atoi(argv[++i]);
        }
        else if (strcmp(a, "--precise") == 0) precise = 1;
        else if (ARG("--numerics") && (!strcmp(v, "exact") || !strcmp(v, "fast"))) precise = !strcmp(v, "exact");
        else if (ARG("--kv-cache-dtype") && (!strcmp(v, "f16") || !strcmp(v, "f32"))) kv_f16 = !strcmp(v, "f16");
        else {
            usage();
            return 2;
        }
#undef ARG
    }
    int32_t *prompt = NULL, n_prompt = 0;
    if (!model_path || (!ids_arg == !prompt_text)) {
        usage();
        return 2;
    }
    if (ids_arg && parse_ids(ids_arg, &prompt, &n_prompt) != 0) {
        fprintf(stderr, "srt-generate: --prompt-ids must be a comma-separated list of token ids\n");
        return 2;
    }
    if (batch <= 0)
        batch = 512;

    srt_model *m = NULL;
    srt_frontend fe = { 0 };
    srt_tokenizer *tok = NULL;   /* fe.tok */
    char *text_buf = NULL, *chat_text = NULL;
    srt_detok dt;
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_sampler_ws *ws = NULL;
    srt_sampler st = { 0 };
    float *logits = NULL;
    int32_t *slots = NULL;
    int rc = 1;

    double t0 = now_s();
    if (srt_model_load(model_path, &m, &err) != SRT_OK)
        goto fail;
    const srt_model_config *c = srt_model_config_of(m);
    if (cvec_path[0]) {
        int n_mod;
        srt_module *mods = srt_model_modules(m, &n_mod);
        if (!(hooks = srt_hook_registry_create(mods, n_mod, &err)) ||
            srt_hook_control_vector_load(hooks, &cvec, c->n_layers, &err) != SRT_OK)
            goto fail;
    }
    if (prompt_text || !print_ids) {
        /* the model's tokenizer and template, as the server loads them */
        srt_err terr = { { 0 } };
        int rc_tok = srt_frontend_load(model_path, NULL, &fe, &terr);
        tok = fe.tok;
        if (rc_tok != SRT_OK) {
            tok = NULL;
            if (prompt_text) {
                srt_err_set(&err, "--prompt needs the model's tokenizer: %s", terr.msg);
                goto fail;
            }
        }
    }
    if (prompt_text) {
        size_t n = 0;
        unsigned fl = SRT_TOK_PARSE_SPECIAL | SRT_TOK_ADD_SPECIAL;
        if (chat) {
            if (render_chat(&fe, system_text, prompt_text, &chat_text, &err) != SRT_OK)
                goto fail;
            prompt_text = chat_text;
            fl = SRT_TOK_PARSE_SPECIAL;   /* the template writes any BOS itself, as apply_chat_template */
        }
        if (srt_tokenizer_encode_alloc(tok, prompt_text, strlen(prompt_text), fl, &prompt, &n, &err) != SRT_OK)
            goto fail;
        if (n == 0) {
            srt_err_set(&err, "the prompt encodes to no tokens");
            goto fail;
        }
        n_prompt = (int32_t)n;
    }
    if (tok && !print_ids) {
        text_buf = malloc(srt_detok_max_out(tok));
        if (!text_buf) {
            srt_err_set(&err, "out of memory");
            goto fail;
        }
        srt_detok_init(&dt, tok, SRT_DETOK_SKIP_SPECIAL);
    }
    double t_load = now_s() - t0;
    int32_t n_ctx = n_prompt + sp.max_tokens;
    srt_runner_opts ro = { .max_batch_tokens = batch, .max_seqs = 1, .n_threads = threads, .precise_matmul = precise,
                           .weights_mmap = weights_mmap };
    if (srt_runner_create(m, &ro, &r, &err) != SRT_OK ||
        srt_kv_pool_create(c, n_ctx, kv_f16 ? SRT_F16 : SRT_F32, &kv, &err) != SRT_OK ||
        srt_sampler_init(&st, &sp, c->vocab_size, c->eos_token_ids, c->n_eos, prompt, n_prompt, &err) != SRT_OK)
        goto fail;
    ws = srt_sampler_ws_create(c->vocab_size);
    logits = malloc((size_t)c->vocab_size * sizeof(float));
    slots = malloc((size_t)n_ctx * sizeof(int32_t));
    if (!ws || !logits || !slots) {
        srt_err_set(&err, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < n_ctx; i++)
        slots[i] = i;
    fprintf(stderr, "srt-generate: %s (%s, %d layers, vocab %d) loaded in %.2fs, %d threads\n", model_path,
            c->architecture, c->n_layers, c->vocab_size, t_load, srt_runner_n_threads(r));

    /* prefill in chunks; the last chunk's logits start the generation */
    int32_t *pos = malloc((size_t)n_ctx * sizeof(int32_t));
    if (!pos) {
        srt_err_set(&err, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < n_ctx; i++)
        pos[i] = i;
    const int32_t *seq_slots[1] = { slots };
    double tp0 = now_s();
    for (int32_t s0 = 0; s0 < n_prompt; s0 += batch) {
        int32_t n = n_prompt - s0 < batch ? n_prompt - s0 : batch;
        int32_t start[2] = { 0, n }, len = s0 + n;
        srt_forward_batch b = {
            .n_tokens = n, .token_ids = prompt + s0, .positions = pos + s0, .out_slots = slots + s0,
            .n_seqs = 1, .seq_start = start, .seq_len = &len, .seq_slots = seq_slots,
            .forward_mode = SRT_FORWARD_PREFILL,
        };
        if (srt_runner_forward(r, kv, &b, logits, &err) != SRT_OK) {
            free(pos);
            goto fail;
        }
    }
    double t_prefill = now_s() - tp0;
    double td0 = now_s();
    int32_t n_gen = 0, cur_pos = n_prompt;
    for (;;) {
        srt_sample_result res;
        float best = -INFINITY, second = -INFINITY;   /* of the logits as the model gave them */
        for (int32_t v = 0; margins && v < c->vocab_size; v++) {
            if (logits[v] > best)
                second = best, best = logits[v];
            else if (logits[v] > second)
                second = logits[v];
        }
        if (srt_sampler_sample(&st, ws, logits, &res) != SRT_OK)
            break;
        n_gen++;
        if (text_buf) {
            size_t n = 0;
            if (srt_detok_push(&dt, res.token, text_buf, srt_detok_max_out(tok), &n, &err) != SRT_OK)
                goto fail;
            fwrite(text_buf, 1, n, stdout);
            if (res.finish && srt_detok_flush(&dt, text_buf, srt_detok_max_out(tok), &n, &err) == SRT_OK) {
                fwrite(text_buf, 1, n, stdout);
                fputc('\n', stdout);
            }
        } else if (margins)
            printf("%d:%.4f%s", res.token, (double)(best - second), res.finish ? "\n" : " ");
        else
            printf("%d%s", res.token, res.finish ? "\n" : " ");
        fflush(stdout);
        if (res.finish)
            break;
        int32_t start[2] = { 0, 1 }, len = cur_pos + 1, tokv = res.token;
        srt_forward_batch b = {
            .n_tokens = 1, .token_ids = &tokv, .positions = pos + cur_pos, .out_slots = slots + cur_pos,
            .n_seqs = 1, .seq_start = start, .seq_len = &len, .seq_slots = seq_slots,
            .forward_mode = SRT_FORWARD_DECODE,
        };
        if (srt_runner_forward(r, kv, &b, logits, &err) != SRT_OK) {
            free(pos);
            goto fail;
        }
        cur_pos++;
    }
    double t_decode = now_s() - td0;
    free(pos);
    fprintf(stderr, "prefill: %d tokens in %.6fs = %.1f tok/s\n", n_prompt, t_prefill, n_prompt / t_prefill);
    fprintf(stderr, "decode: %d tokens in %.6fs = %.1f tok/s\n", n_gen - 1 > 0 ? n_gen - 1 : 0, t_decode,
            n_gen > 1 ? (n_gen - 1) / t_decode : 0.0);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "srt-generate: %s\n", err.msg);
done:
    srt_sampler_free(&st);
    srt_sampler_ws_free(ws);
    free(text_buf);
    free(chat_text);
    srt_frontend_free(&fe);
    free(logits);
    free(slots);
    free(prompt);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
    srt_hook_registry_free(hooks);
    srt_model_free(m);
    return rc;
}
