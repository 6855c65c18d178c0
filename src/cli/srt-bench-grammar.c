/* srt-bench-grammar VOCAB WALKS: grammar compile and mask times on a vocabulary and walks that
 * scripts/bench_grammar.py writes (so xgrammar is timed on exactly the same cases).
 *
 * VOCAB: line 1 "eos <id>", then one token per line as hex bytes ("-" for special tokens).
 * WALKS: the fixture format of scripts/make_grammar_fixtures.py (case / walk / step lines).
 * Prints one JSON line per case: compile_us (compile + every state's token cache, as xgrammar's
 * compiler also precomputes), compile_lazy_us (the automaton alone), mask_us (mean per step,
 * caches precomputed), mask_max_us, steps, and lazy_total_us: a fresh lazy grammar compiled and
 * every mask of the walks filled, caches on first use (the cost of the case from scratch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <yajl/yajl_tree.h>

#include "srt/grammar.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static srt_grammar *compile(srt_grammar_vocab *v, const char *kind, const char *text, srt_err *err)
{
    srt_grammar *g = NULL;
    srt_grammar_json_opts o = { 4, 0 };
    if (!strcmp(kind, "schema"))
        srt_grammar_compile_json_schema(v, text, strlen(text), &o, &g, err);
    else if (!strcmp(kind, "regex"))
        srt_grammar_compile_regex(v, text, strlen(text), &g, err);
    else
        srt_grammar_compile_gbnf(v, text, strlen(text), &g, err);
    return g;
}

/* a fresh grammar, caches filled on first use, every mask of the walks */
static double lazy_total(srt_grammar_vocab *v, const char *kind, const char *text, const int32_t *toks,
                         const int *walk_start, int n_walks, int n_toks, uint32_t *mask)
{
    srt_err err;
    double t0 = now_us();
    srt_grammar *g = compile(v, kind, text, &err);
    if (!g)
        return 0;
    for (int w = 0; w < n_walks; w++) {
        srt_grammar_matcher *m = srt_grammar_matcher_new(g);
        int end = w + 1 < n_walks ? walk_start[w + 1] : n_toks;
        for (int i = walk_start[w]; i < end; i++) {
            srt_grammar_matcher_fill_mask(m, mask);
            srt_grammar_matcher_accept_token(m, toks[i]);
        }
        srt_grammar_matcher_free(m);
    }
    srt_grammar_free(g);
    return now_us() - t0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: srt-bench-grammar VOCAB WALKS\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) { perror(argv[1]); return 1; }
    size_t cap = 1 << 18, n = 0;
    char **bytes = calloc(cap, sizeof(char *));
    size_t *lens = calloc(cap, sizeof(size_t));
    uint8_t *special = calloc(cap, 1);
    int32_t eos = -1;
    static char line[1 << 16];
    if (!fgets(line, sizeof line, f) || sscanf(line, "eos %d", &eos) != 1) {
        fprintf(stderr, "%s: no eos line\n", argv[1]);
        return 1;
    }
    while (fgets(line, sizeof line, f) && n < cap) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '-') {
            special[n] = 1;
        } else {
            size_t l = strlen(line) / 2;
            bytes[n] = malloc(l + 1);
            for (size_t i = 0; i < l; i++) {
                unsigned b;
                sscanf(line + 2 * i, "%2x", &b);
                bytes[n][i] = (char)b;
            }
            lens[n] = l;
        }
        n++;
    }
    fclose(f);
    srt_err err;
    srt_grammar_vocab *v;
    if (srt_grammar_vocab_new(n, (const char *const *)bytes, lens, special, &eos, 1, &v, &err) != SRT_OK) {
        fprintf(stderr, "vocab: %s\n", err.msg);
        return 1;
    }
    uint32_t *mask = malloc(srt_grammar_mask_words(v) * 4);
    f = fopen(argv[2], "r");
    if (!f) { perror(argv[2]); return 1; }
    srt_grammar *g = NULL;
    srt_grammar_matcher *m = NULL;
    char kind[16] = "";
    double mask_sum = 0, mask_max = 0, t_compile = 0, t_lazy = 0;
    int steps = 0, cases = 0;
    static int32_t toks[1 << 16];
    static int walk_start[1 << 12];
    int n_toks = 0, n_walks = 0;
    char text[1 << 16];
#define FLUSH() if (g) { srt_grammar_matcher_free(m); m = NULL; srt_grammar_free(g); g = NULL; \
                         double lt = lazy_total(v, kind, text, toks, walk_start, n_walks, n_toks, mask); \
                         printf("{\"case\": %d, \"kind\": \"%s\", \"compile_us\": %.1f, \"compile_lazy_us\": %.1f, " \
                                "\"mask_us\": %.2f, \"mask_max_us\": %.1f, \"steps\": %d, \"lazy_total_us\": %.1f}\n", \
                                cases - 1, kind, t_compile, t_lazy, steps ? mask_sum / steps : 0, mask_max, steps, lt); }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "case ", 5)) {
            FLUSH();
            char *sp = strchr(line + 5, ' ');
            snprintf(kind, sizeof kind, "%.*s", (int)(sp - line - 5), line + 5);
            char yerr[128];
            yajl_val t = yajl_tree_parse(sp + 1, yerr, sizeof yerr);
            cases++;
            if (!t || !YAJL_IS_STRING(t)) { yajl_tree_free(t); continue; }
            snprintf(text, sizeof text, "%s", t->u.string);
            n_toks = n_walks = 0;
            double t0 = now_us();
            g = compile(v, kind, t->u.string, &err);
            t_lazy = now_us() - t0;
            if (g) {
                srt_grammar_free(g);
                t0 = now_us();
                g = compile(v, kind, t->u.string, &err);
                srt_grammar_precompute(g);
                t_compile = now_us() - t0;
            } else {
                fprintf(stderr, "case %d: %s\n", cases - 1, err.msg);
            }
            yajl_tree_free(t);
            mask_sum = mask_max = 0;
            steps = 0;
        } else if (!strcmp(line, "walk") && g) {
            srt_grammar_matcher_free(m);
            m = srt_grammar_matcher_new(g);
            if (n_walks < (1 << 12))
                walk_start[n_walks++] = n_toks;
        } else if (!strncmp(line, "step ", 5) && m) {
            int tok;
            sscanf(line + 5, "%d", &tok);
            double t0 = now_us();
            srt_grammar_matcher_fill_mask(m, mask);
            double dt = now_us() - t0;
            mask_sum += dt;
            if (dt > mask_max)
                mask_max = dt;
            steps++;
            srt_grammar_matcher_accept_token(m, tok);
            if (n_toks < (1 << 16))
                toks[n_toks++] = tok;
        }
    }
    FLUSH();
    fclose(f);
    free(mask);
    srt_grammar_vocab_free(v);
    for (size_t i = 0; i < n; i++)
        free(bytes[i]);
    free(bytes); free(lens); free(special);
    return 0;
}
